import Foundation
import SpoolStorage

/// The uploader's rules, as a value: when a flush pass runs, who waits for
/// which pass, pause and stop, the backoff and its timer, and what holds
/// uploads back (the network path, the upload policy, a pause in the
/// database, another process's lease).
///
/// Each method changes the value and returns what ``Uploader`` must do
/// next — start the passes, resume or fail waiters, arm a retry timer, end
/// or refuse a pass. Nothing here blocks, calls out, reads a clock or
/// touches a database: time comes in as `now`, in seconds of the database's
/// clock. So the rules are tested without HTTP, SQLite or time
/// (`UploadScheduleTests`).
///
/// One pass runs at a time. A trigger while one runs is owed a pass right
/// after it, never lost and never concurrent; a trigger while paused is
/// owed one after the last ``resume()``. A `flush()` caller's waiter is
/// carried by the next pass to begin and resumed when it ends — or, when a
/// pause ended it after its request in flight, by the pass after the pause.
/// ``stop(_:)`` fails the waiters no pass carries yet and takes no more.
///
/// `FlushWaiter` is what a `flush()` caller leaves (a continuation);
/// `PassWaiter` what a `stop()` or `pause()` caller leaves to hear that the
/// pass in flight ended.
struct UploadSchedule<FlushWaiter, PassWaiter> {
    /// A trigger for the uploader to pull: a forced one ignores the backoff
    /// and the network path's absence (an explicit `flush()`).
    struct Trigger: Equatable {
        var force: Bool
    }

    let retry: RetryPolicy
    /// How long the upload lease lasts (``Uploader/Settings/leaseDuration``).
    let leaseDuration: TimeInterval

    // MARK: - Passes

    /// A pass is running (or its task is about to run it).
    private(set) var running = false
    /// A pass is owed: a trigger arrived while one ran or while paused.
    private(set) var owed = false
    /// One of the owed triggers was forced.
    private(set) var owedForced = false
    private(set) var closed = false
    /// Holds from ``pause(_:)``: while above zero no pass begins, and the
    /// pass running ends after its request in flight.
    private(set) var pauses = 0
    /// `flush()` callers waiting for the next pass to begin.
    private var waiting: [FlushWaiter] = []
    /// The waiters the running pass carries: resumed with its result.
    private var carried: [FlushWaiter] = []
    private var stopWaiters: [PassWaiter] = []
    private var pauseWaiters: [PassWaiter] = []

    // MARK: - Backoff and what holds uploads back

    /// Failed attempts since the last success.
    private(set) var failures = 0
    /// When the backoff ends, in seconds of the database's clock.
    private(set) var retryAt: Double?
    /// Which retry timer is the live one: a timer that fires for an older
    /// one (replaced, or cancelled by a stop or a network path's return)
    /// does nothing.
    private(set) var retryGeneration = 0
    private(set) var lastFailure: String?
    /// Why uploading is held back (the collector refused requests
    /// themselves); nil once one is accepted.
    private(set) var heldBack: String?
    /// What the system says of the network path (usable and unmetered when
    /// nothing says).
    private(set) var path = NetworkPathState(usable: true, metered: false)
    /// Which networks uploads may use.
    private(set) var policy: UploadPolicy
    private var random: FastRandom

    init(retry: RetryPolicy, leaseDuration: TimeInterval, policy: UploadPolicy, random: FastRandom = FastRandom()) {
        self.retry = retry
        self.leaseDuration = leaseDuration
        self.policy = policy
        self.random = random
    }

    /// The waiters still to be resumed by a pass (carried or waiting).
    var flushWaiterCount: Int { waiting.count + carried.count }

    /// `stop()` and `pause()` callers waiting for the pass in flight.
    var passWaiterCount: Int { stopWaiters.count + pauseWaiters.count }

    /// A pass may go on to its next batch: not stopped, not paused.
    var passMayContinue: Bool { !closed && pauses == 0 }

    // MARK: - Triggers

    /// A trigger: an automatic one (a full batch, the timer, the
    /// background, a report) or a forced one (a `flush()`).
    ///
    /// - Returns: true when the uploader starts its passes (a task); false
    ///   when the trigger is owed to a running pass, or to the resume, or
    ///   the uploader is stopped.
    mutating func trigger(_ trigger: Trigger) -> Bool {
        guard !closed else { return false }
        owed = true
        owedForced = owedForced || trigger.force
        guard pauses == 0, !running else { return false }
        running = true
        return true
    }

    /// What ``flush(_:force:)`` tells its caller.
    enum Flush {
        /// Stopped: fail the waiter (it was not kept).
        case closed(FlushWaiter)
        /// Kept; start the passes when `startPasses`.
        case kept(startPasses: Bool)
    }

    /// A caller waits for the next pass to begin and end: `flush()`
    /// (forced), or a wait for the system's reports to be settled.
    mutating func flush(_ waiter: FlushWaiter, force: Bool) -> Flush {
        guard !closed else { return .closed(waiter) }
        waiting.append(waiter)
        return .kept(startPasses: trigger(Trigger(force: force)))
    }

    /// A pass begins: it carries the waiters there are.
    ///
    /// - Returns: whether it is forced (a forced trigger, or a waiter).
    mutating func passBegins() -> Bool {
        precondition(running, "a pass begins only after a trigger started the passes")
        let force = owedForced || !waiting.isEmpty
        carried = waiting
        waiting = []
        (owed, owedForced) = (false, false)
        return force
    }

    /// What the uploader does when a pass ends.
    struct PassEnd {
        /// Resume these with the pass's result.
        var resume: [FlushWaiter] = []
        /// Run another pass at once.
        var another = false
        /// The passes are over: resume these `stop()` and `pause()` callers.
        var passWaiters: [PassWaiter] = []
    }

    /// The running pass ended, `succeeded` or not. A pause that ended it
    /// (after its request in flight) keeps its waiters for the pass after
    /// the resume, unless it failed; otherwise they hear the result.
    mutating func passEnded(succeeded: Bool) -> PassEnd {
        var end = PassEnd()
        if pauses > 0, !closed, succeeded {
            waiting = carried + waiting
        } else {
            end.resume = carried
        }
        carried = []
        if !waiting.isEmpty { owed = true }
        if passMayContinue, owed {
            end.another = true
            return end
        }
        running = false
        end.passWaiters = stopWaiters + pauseWaiters
        (stopWaiters, pauseWaiters) = ([], [])
        return end
    }

    // MARK: - Pause and stop

    /// A hold on passes: none begins until the matching ``resume()``.
    ///
    /// - Returns: `waiter` when it may resume now (no pass runs); nil when
    ///   it is kept until the running pass ends.
    mutating func pause(_ waiter: PassWaiter) -> PassWaiter? {
        pauses += 1
        guard running else { return waiter }
        pauseWaiters.append(waiter)
        return nil
    }

    /// Ends one ``pause(_:)``.
    ///
    /// - Returns: the trigger to pull when passes are owed and no hold is
    ///   left.
    mutating func resume() -> Trigger? {
        pauses = max(0, pauses - 1)
        guard pauses == 0, !closed, owed else { return nil }
        // The trigger returned owes the pass again.
        defer { (owed, owedForced) = (false, false) }
        return Trigger(force: owedForced)
    }

    /// What ``stop(_:)`` tells its caller.
    struct Stop {
        /// Fail these with "closed": no pass will carry them.
        var failing: [FlushWaiter]
        /// The stop's own waiter when it may resume now (no pass runs); nil
        /// when it is kept until the running pass ends.
        var resumeNow: PassWaiter?
    }

    /// Stops for good: no pass begins, the retry timer is cancelled, and
    /// the caller waits for the pass in flight, if any.
    mutating func stop(_ waiter: PassWaiter) -> Stop {
        closed = true
        retryGeneration += 1
        let failing = waiting
        waiting = []
        (owed, owedForced) = (false, false)
        guard running else { return Stop(failing: failing, resumeNow: waiter) }
        stopWaiters.append(waiter)
        return Stop(failing: failing, resumeNow: nil)
    }

    // MARK: - Backoff

    /// A retry timer to arm: after `delay` seconds, report
    /// ``retryDue(generation:pending:)`` with `generation`.
    struct RetryTimer: Equatable {
        var delay: TimeInterval
        var generation: Int
    }

    /// A failed attempt: the next one waits for the backoff (or the
    /// collector's `Retry-After`). `heldBack`: the collector refused the
    /// request itself, which the statistics say until one is accepted.
    mutating func failed(_ reason: String, retryAfter: TimeInterval?, heldBack: Bool = false, now: Double)
        -> RetryTimer
    {
        failures += 1
        lastFailure = reason
        if heldBack { self.heldBack = reason }
        let delay = retry.delay(attempt: failures, retryAfter: retryAfter, random: &random)
        retryAt = now + delay
        return nextRetryTimer(after: delay)
    }

    /// A success: the backoff starts over.
    mutating func recovered() {
        failures = 0
        retryAt = nil
        lastFailure = nil
        heldBack = nil
    }

    /// Another process holds the lease until `expires`: try again once it
    /// expires (at least a second from now, at most a lease), keeping the
    /// backoff as it is.
    mutating func leaseHeldElsewhere(until expires: Double, now: Double) -> RetryTimer {
        nextRetryTimer(after: max(1, min(leaseDuration, expires - now)))
    }

    /// A retry timer fired. The live one ends the backoff.
    ///
    /// - Returns: the trigger to pull when it is the live one and events
    ///   are `pending`.
    mutating func retryDue(generation: Int, pending: Bool) -> Trigger? {
        guard generation == retryGeneration else { return nil }  // replaced or cancelled
        retryAt = nil
        return pending ? Trigger(force: false) : nil
    }

    /// Seconds until the backoff ends, if it has not.
    func nextRetry(now: Double) -> TimeInterval? {
        retryAt.flatMap { $0 > now ? $0 - now : nil }
    }

    private mutating func nextRetryTimer(after delay: TimeInterval) -> RetryTimer {
        retryGeneration += 1
        return RetryTimer(delay: delay, generation: retryGeneration)
    }

    // MARK: - What holds uploads back

    /// Uploads may use the network there is: a path, and one the policy
    /// allows.
    var mayUseNetwork: Bool { path.usable && policyAllows }

    /// The policy lets uploads use the path there is.
    var policyAllows: Bool { policy == .always || !path.metered }

    /// The system reported the path. When uploads may go again, the backoff
    /// ends (it was for a collector that could not be reached) and what
    /// waits goes out.
    mutating func networkChanged(_ path: NetworkPathState, pending: Bool) -> Trigger? {
        let (before, was) = (mayUseNetwork, self.path)
        self.path = path
        guard path != was, !before, mayUseNetwork else { return nil }
        retryAt = nil
        retryGeneration += 1
        return pending ? Trigger(force: false) : nil
    }

    /// Changes which networks uploads may use; allowed now, what waits goes
    /// out.
    mutating func setPolicy(_ policy: UploadPolicy, pending: Bool) -> Trigger? {
        let before = policyAllows
        self.policy = policy
        return !before && policyAllows && pending ? Trigger(force: false) : nil
    }

    /// Whether a pass reads its next batch.
    enum Gate: Equatable {
        case go
        /// The pass ends quietly: what lifts the hold triggers the next.
        case endPass
        /// The pass ends, and its forced caller hears why.
        case refuse(String)
    }

    /// Before each batch of a pass: a forced pass goes whatever the backoff
    /// and the path say, but never over a network the policy forbids.
    func gate(force: Bool, now: Double) -> Gate {
        if !force, !path.usable { return .endPass }  // the path's return triggers the next pass
        if !policyAllows { return force ? .refuse(Self.meteredReason) : .endPass }
        if !force, let retryAt, retryAt > now { return .endPass }  // the retry timer comes back
        return .go
    }

    /// The database says uploads are paused (``EventEngine/pauseUploads()``).
    func pausedInDatabase(force: Bool) -> Gate {
        force ? .refuse(Self.pausedReason) : .endPass
    }

    static var meteredReason: String {
        "the network is metered and uploads use unmetered networks only (UploadPolicy.unmeteredOnly)"
    }

    static var pausedReason: String { "uploads are paused (pauseUploads()); resumeUploads() lets them go" }
}

extension UploadSchedule: Sendable where FlushWaiter: Sendable, PassWaiter: Sendable {}
