import Foundation

/// A request body gzipped ahead, on ``Uploader/compression``, or by the
/// database queue itself when it needs the body before that queue has
/// started on it.
///
/// Waiting for it never hops threads: a body the compression queue has not
/// started is gzipped by the thread that asks for it, and one it has started
/// is waited for (one gzip at most) without leaving that thread. Resuming a
/// suspended task there costs a wake-up of the database queue, which on a
/// busy machine comes a whole gzip later.
final class GzipJob: @unchecked Sendable {
    // Safe: `state` is only touched under `condition`; the rest is immutable.
    private enum State {
        case waiting(Data)
        case running
        /// nil: zlib failed (the body goes uncompressed).
        case done(Data?)
    }

    private let condition = NSCondition()
    /// Guarded by `condition`.
    private var state: State
    private let compress: @Sendable (Data) -> Data?

    /// Starts gzipping `body` on `queue` with `compress` (zlib's gzip).
    init(_ body: Data, on queue: DispatchQueue, compress: @escaping @Sendable (Data) -> Data? = { Gzip.compress($0) }) {
        state = .waiting(body)
        self.compress = compress
        queue.async { self.runIfWaiting() }
    }

    /// Whether the gzipped body is ready.
    var isDone: Bool {
        condition.withLock {
            if case .done = state { return true }
            return false
        }
    }

    /// The body gzipped (nil: zlib failed): gzipped here if the queue has
    /// not started it, else waited for.
    func result() -> Data? {
        if let body = claim() { return finish(compress(body)) }
        return condition.withLock {
            while true {
                if case .done(let gzipped) = state { return gzipped }
                condition.wait()
            }
        }
    }

    private func runIfWaiting() {
        guard let body = claim() else { return }
        finish(compress(body))
    }

    /// The body to gzip, if nobody has started on it.
    private func claim() -> Data? {
        condition.withLock {
            guard case .waiting(let body) = state else { return nil }
            state = .running
            return body
        }
    }

    @discardableResult
    private func finish(_ gzipped: Data?) -> Data? {
        condition.withLock {
            state = .done(gzipped)
            condition.broadcast()
        }
        return gzipped
    }
}
