import Dispatch

/// A serial executor backed by a dispatch queue: an actor using it runs its
/// jobs on the queue, in order with the queue's other work.
///
/// It implements `enqueue(_: UnownedJob)`, the form every OS with Swift
/// concurrency has (iOS 13, macOS 10.15), so it does not raise the platform
/// floor; Linux has no `DispatchSerialQueue` executor either.
package final class QueueExecutor: SerialExecutor, @unchecked Sendable {
    // Safe: `queue` is immutable and dispatch queues are thread-safe.
    private let queue: DispatchQueue

    package init(queue: DispatchQueue) {
        self.queue = queue
    }

    package func enqueue(_ job: UnownedJob) {
        let executor = asUnownedSerialExecutor()
        queue.async { job.runSynchronously(on: executor) }
    }

    package func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    /// Called by the runtime (where the OS has it) to check isolation.
    package func checkIsolated() {
        dispatchPrecondition(condition: .onQueue(queue))
    }
}
