import Dispatch

/// A serial executor backed by a dispatch queue (Linux has no
/// `DispatchSerialQueue` executor): an actor using it runs its jobs on the
/// queue, in order with the queue's other work.
final class QueueExecutor: SerialExecutor, @unchecked Sendable {
    // Safe: `queue` is immutable and dispatch queues are thread-safe.
    private let queue: DispatchQueue

    init(queue: DispatchQueue) {
        self.queue = queue
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedSerialExecutor()) }
    }

    func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    func checkIsolated() {
        dispatchPrecondition(condition: .onQueue(queue))
    }
}
