import Foundation
import SpoolStorage

/// Pipelined preparation: while a request is in flight, the batch after it
/// is read (in the transaction that saves the batch before it) and gzipped
/// on another thread, so the next request goes as soon as the answer allows.
/// While the request's own body is still being gzipped, the read comes
/// first, so that reading and gzipping overlap when answers come at once.
///
/// By default one request is in flight at a time, so the collector receives
/// events in log order. The batch read ahead is sent only when the answer
/// leaves it next: the request before it was accepted whole (or settled
/// whole here, per event), the file is the one it was read from, and the
/// database says that none of its events has passed (the queue bound, an
/// erasure in another process), that uploads are not paused and that the
/// lease is still this engine's for a whole request.
/// Anything else — a retry, a bisection, dead letters, a refusal of the
/// request, `stop()`, a pause, a consent withdrawal, an erasure, another
/// process's lease — discards it, and the next batch is read again from the
/// position in the database: the same events make the same batch, under the
/// same batch id.
///
/// With ``EngineConfiguration/maximumConcurrentRequests`` above 1, up to
/// that many requests are in flight: each batch read ahead is sent as soon
/// as it is read (its read renewed the lease and checked the pause), and
/// the answers are acted on in log order, by the same rules. A batch whose
/// request went before the answer that would have let it go is discarded
/// once its own answer comes, whatever that answer: its events are sent
/// again after the request ahead of them, under the same batch id.
extension Uploader {
    /// A batch read, and gzipped when requests are, while the request
    /// before it was in flight.
    struct Prepared: Sendable {
        /// The last position of the batch it follows.
        let after: Int64
        let batch: UploadBatch
        /// The database file it was read from (``DatabaseQueue/fileGeneration``).
        let generation: Int
        /// Its body being gzipped on another thread; nil when requests are
        /// not gzipped (or not through a transport), or it went already.
        let gzipped: GzipJob?
        /// Its request, when it went as soon as it was read (more than one
        /// request in flight).
        var request: InFlightRequest? = nil
    }

    /// What to read ahead of the request in flight, and the accepted batch
    /// before it that the same transaction saves.
    struct ReadAhead: Sendable {
        /// The last position of the batch in flight.
        let after: Int64
        let saving: (first: Int64, last: Int64)?
        /// The hand-off whose events `saving` are.
        let handoff: String?
    }

    /// How the read ahead went, for the tests.
    struct PipelineCounts: Sendable {
        /// Batches read while the request before them was in flight.
        var prepared = 0
        /// Of those, the batches sent as read.
        var sent = 0
        /// Of those, the batches discarded: the answer changed what comes
        /// next, or the pass ended.
        var discarded = 0
    }

    /// Where bodies read ahead are gzipped while the database queue goes
    /// on: one serial queue, so that a gzip never competes with another
    /// for the cores the database queue needs.
    static let compression = DispatchQueue(label: "spool.gzip", qos: .utility)

    /// In the transaction that saves `ahead.saving`: renews the lease and
    /// reads the batch after the one in flight, keeping the lease whatever
    /// it finds (the request in flight needs it). The body is gzipped on
    /// another thread.
    ///
    /// - Returns: nil when the read found anything but a batch.
    func readAhead(_ ahead: ReadAhead) throws -> Prepared? {
        // A salvage since the batch in flight was read: its predecessor's
        // positions are not the new file's (not saved), and what is read now
        // is discarded before it is sent.
        let generation = log.database.fileGeneration
        let saving = generation == readGeneration ? ahead.saving : nil
        guard case .batch(let batch) = try save(saving, handoff: ahead.handoff, thenRead: .after(ahead.after))
        else { return nil }
        pipeline.withLock { $0.prepared += 1 }
        if settings.concurrentRequests > 1, !(handoffs?.wanted() ?? false) {
            let request = startExchange(batch, compress: compresses)
            return Prepared(after: ahead.after, batch: batch, generation: generation, gzipped: nil, request: request)
        }
        var gzipped: GzipJob?
        if compresses, case .transport = client.sender {
            gzipped = GzipJob(batch.body, on: Self.compression)
        }
        return Prepared(after: ahead.after, batch: batch, generation: generation, gzipped: gzipped)
    }

    /// Reads ahead into `window` (``readAhead(_:)``), the first read saving
    /// `ahead.saving`: one batch, or with more than one request in flight,
    /// as many as fill the window while events wait behind it.
    func fill(_ window: inout [Prepared], _ ahead: ReadAhead) throws {
        var next = ReadAhead(
            after: window.last?.batch.last ?? ahead.after, saving: ahead.saving, handoff: ahead.handoff)
        while let prepared = try readAhead(next) {
            window.append(prepared)
            let last = prepared.batch.last
            guard window.count < settings.concurrentRequests - 1, signals.withLock({ $0.head }) > last else { return }
            next = ReadAhead(after: last, saving: nil, handoff: nil)
        }
    }

    /// Takes the first batch of `window` if it is still the next batch to
    /// send after `last`, the end of the batch before it (accepted whole, or
    /// settled whole here, per event), checking in the database that none
    /// of its events has passed, that uploads are not paused and that the
    /// lease is this engine's for a whole request more. Otherwise the whole window is discarded (its
    /// requests in flight answered first), and nil says: read the next batch.
    func takePrepared(_ window: inout [Prepared], after last: Int64?) async throws -> Prepared? {
        guard let ready = window.first else { return nil }
        guard let last, ready.after == last, ready.batch.first > last,
            ready.generation == readGeneration,
            ready.generation == log.database.fileGeneration, !(handoffs?.wanted() ?? false)
        else {
            await discardWindow(&window)
            return nil
        }
        let (consumer, owner, patience) = (Self.consumerID, self.owner, settings.dispatchTimeout)
        let found: (position: Int64, lease: ConsumerLease?, uploadsPaused: Bool)?
        do {
            found = try log.database.onQueue { try $0.standing(of: consumer) }
        } catch {
            await discardWindow(&window)
            throw error
        }
        guard let standing = found, !standing.uploadsPaused, standing.position < ready.batch.first,
            let lease = standing.lease, lease.owner == owner, lease.expires >= now + patience
        else {
            await discardWindow(&window)
            return nil
        }
        window.removeFirst()
        pipeline.withLock { $0.sent += 1 }
        return ready
    }

    /// Discards every batch of `window`: a request that went is answered
    /// first (at most ``Settings/concurrentRequests`` are ever in flight)
    /// and noted as retried, whatever its answer, for its events are sent
    /// again after the request ahead of them.
    func discardWindow(_ window: inout [Prepared]) async {
        let discarded = window
        window.removeAll()
        for prepared in discarded {
            discard(prepared)
            guard let request = prepared.request else { continue }
            let exchanged = await answer(to: request)
            counters.requests += 1
            var detail = "not settled: it went before the answer that would have let it go; its events are sent again"
            if case .failed(let reason) = exchanged.answer { detail = reason + "; " + detail }
            note(prepared.batch, exchanged, .retried, detail: detail)
        }
    }

    /// Whether the batches read ahead of a batch may still go next after
    /// the answer to it, read as `reading`: the collector accepted all of
    /// it, or answered per event (if that leaves any event for a retry, the
    /// pass backs off and they are discarded then).
    static func keepsWindow(_ reading: Reading) -> Bool {
        switch reading {
        case .accepted, .perEvent: true
        default: false
        }
    }

    /// A batch read ahead that is not sent as read.
    func discard(_ prepared: Prepared) {
        pipeline.withLock { $0.discarded += 1 }
    }
}

/// A request sent and not answered yet. The first answer is the one kept:
/// the transport's or dispatcher's, the dispatch timeout's, or the app's
/// suspension's.
final class InFlightRequest: Sendable {
    /// When it went (``Uploader/now``).
    let sentAt: TimeInterval
    /// Whether its body goes gzipped, as far as is known before the answer.
    let compressed: Bool

    private struct State {
        var answered = false
        /// The answer, until it is taken.
        var answer: UploadClient.Answer?
        var waiter: CheckedContinuation<UploadClient.Answer, Never>?
        /// What stops the request early, until it is answered: the timer
        /// holds this state for the whole dispatch timeout, and must not
        /// keep a finished request's task alive that long.
        var stop: (@Sendable () -> Void)?
    }

    private let state = Protected(State())

    init(sentAt: TimeInterval, compressed: Bool) {
        self.sentAt = sentAt
        self.compressed = compressed
    }

    /// Keeps `stop` until the answer; false when it was answered already.
    func watch(_ stop: @escaping @Sendable () -> Void) -> Bool {
        state.withLock { state in
            guard !state.answered else { return false }
            state.stop = stop
            return true
        }
    }

    /// Whether an answer came.
    var isAnswered: Bool {
        state.withLock { $0.answered }
    }

    /// Gives up on the request: `answer` is its answer (not the failure
    /// that stopping it brings), and it is stopped.
    func stop(answering answer: UploadClient.Answer) {
        let stop = state.withLock { $0.stop }
        finish(answer)
        stop?()
    }

    /// The first answer is kept; later ones are ignored.
    func finish(_ answer: UploadClient.Answer) {
        let waiter = state.withLock { state -> CheckedContinuation<UploadClient.Answer, Never>? in
            guard !state.answered else { return nil }
            state.answered = true
            state.stop = nil
            guard let waiter = state.waiter else {
                state.answer = answer
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume(returning: answer)
    }

    /// Resumes `waiter` with the answer, now or once it comes. Called
    /// once, from the waiter's own `withCheckedContinuation`: an `async`
    /// method here would run off the caller's executor, a hop off the
    /// database queue and back for every request.
    func deliver(to waiter: CheckedContinuation<UploadClient.Answer, Never>) {
        let answer = state.withLock { state -> UploadClient.Answer? in
            guard let answer = state.answer else {
                state.waiter = waiter
                return nil
            }
            state.answer = nil
            return answer
        }
        if let answer { waiter.resume(returning: answer) }
    }
}
