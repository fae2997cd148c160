import Foundation
import SpoolStorage

/// Time the OS grants to finish work before it suspends the process.
///
/// On iOS, tvOS, watchOS and visionOS the platform asks
/// `ProcessInfo.performExpiringActivity(withReason:using:)` — available in
/// app extensions too, where `UIApplication.shared` is not — whose block
/// keeps the process running until the work ends, and which says when the
/// time is up. macOS and Linux do not suspend processes this way: the time
/// is granted.
enum BackgroundActivity {
    /// Runs `work`, telling it through `expired` when the granted time ran
    /// out (it should then stop at once: its events stay queued). When the
    /// system grants no time at all, `work` runs at once with its time
    /// already up. Returns when `work` has finished.
    static func run(
        on platform: any SpoolPlatform, _ reason: String,
        _ work: @escaping @Sendable (_ expired: Expiry) async -> Void
    ) async {
        let expiry = Expiry()
        let finished = Promise<Void>()
        let called = Protected(false)
        platform.performExpiringActivity(reason: reason) { expired in
            let first = called.withLock { called in
                defer { called = true }
                return !called
            }
            if expired { expiry.expire() }
            guard first else { return }  // the time granted below ran out
            // Unstructured: the work is async, and this block is the system's.
            let running = Task { await work(expiry) }
            if expired {
                // No time granted: nothing holds the process here, and the
                // work, told so, does only what needs no time.
                Task {
                    await running.value
                    finished.fulfill(())
                }
                return
            }
            // The time lasts as long as this block: wait here, on the thread
            // the system gives it, until the work is done.
            let done = DispatchSemaphore(value: 0)
            Task {
                await running.value
                done.signal()
            }
            done.wait()
            finished.fulfill(())
        }
        await finished.value
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
