import Foundation
import SpoolStorage

/// Time the OS grants to finish work before it suspends the process.
///
/// On iOS, tvOS, watchOS and visionOS this is
/// `ProcessInfo.performExpiringActivity(withReason:using:)` — available in
/// app extensions too, where `UIApplication.shared` is not — whose block
/// keeps the process running until the work ends, and which says when the
/// time is up. macOS and Linux do not suspend processes this way: the work
/// simply runs.
enum BackgroundActivity {
    /// Runs `work`, telling it through `expired` when the granted time ran
    /// out (it should then stop at once: its events stay queued). Returns
    /// when `work` has finished.
    static func run(
        _ reason: String, _ work: @escaping @Sendable (_ expired: Expiry) async -> Void
    ) async {
        let expiry = Expiry()
        #if os(iOS) || os(tvOS) || os(watchOS) || os(visionOS)
            let finished = Promise<Void>()
            ProcessInfo.processInfo.performExpiringActivity(withReason: reason) { expired in
                if expired {
                    expiry.expire()
                    return
                }
                // The activity lasts as long as this block: wait here (a
                // thread the system gives for it) until the work is done.
                let done = DispatchSemaphore(value: 0)
                // Unstructured: the work is async and this synchronous block must outlive it.
                Task {
                    await work(expiry)
                    done.signal()
                }
                done.wait()
                finished.fulfill(())
            }
            await finished.value
        #else
            await work(expiry)
        #endif
    }

    /// Whether the granted time ran out, and what to do then.
    final class Expiry: Sendable {
        private let state = Protected<(expired: Bool, handlers: [@Sendable () -> Void])>((false, []))

        var isExpired: Bool { state.withLock { $0.expired } }

        /// Calls `handler` when the time runs out (at once if it already has).
        func onExpiry(_ handler: @escaping @Sendable () -> Void) {
            let now = state.withLock { state -> Bool in
                if !state.expired { state.handlers.append(handler) }
                return state.expired
            }
            if now { handler() }
        }

        func expire() {
            let handlers = state.withLock { state -> [@Sendable () -> Void] in
                guard !state.expired else { return [] }
                state.expired = true
                defer { state.handlers.removeAll() }
                return state.handlers
            }
            for handler in handlers { handler() }
        }
    }
}
