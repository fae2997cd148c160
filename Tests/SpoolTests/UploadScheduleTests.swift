import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// The uploader's rules without HTTP, SQLite or time: `UploadSchedule` is a
/// value, and each test drives it through one interleaving and checks what
/// it tells `Uploader` to do. Waiters are labels here; `ScheduleDriver`
/// performs the actions as the actor does.
struct UploadScheduleTests {
    typealias Schedule = UploadSchedule<String, String>

    static func schedule(policy: UploadPolicy = .always) -> Schedule {
        Schedule(retry: RetryPolicy(jitter: 1...1), leaseDuration: 90, policy: policy)
    }

    // MARK: - Passes

    @Test("D2, D3: a trigger while a pass runs is owed one pass after it, never a second at once")
    func oneAtATime() {
        var schedule = Self.schedule()
        let started = schedule.trigger(.init(force: false))
        let firstForced = schedule.passBegins()
        let owed = [schedule.trigger(.init(force: false)), schedule.trigger(.init(force: true))]
        #expect(started && !firstForced)
        #expect(owed == [false, false], "a pass runs: owed, not started")
        let end = schedule.passEnded(succeeded: true)
        #expect(end.another && schedule.running)
        let secondForced = schedule.passBegins()
        #expect(secondForced, "one of the owed triggers was forced")
        let last = schedule.passEnded(succeeded: true)
        #expect(!last.another && !schedule.running, "the triggers were one pass's worth")
        let again = schedule.trigger(.init(force: false))
        #expect(again, "idle again: the next trigger starts the passes")
    }

    @Test("D1: a flush's waiter is carried by the next pass to begin and hears its result once")
    func flushWaiterCarried() {
        var schedule = Self.schedule()
        _ = schedule.trigger(.init(force: false))
        _ = schedule.passBegins()
        guard case .kept(let start) = schedule.flush("f", force: true) else {
            Issue.record("refused")
            return
        }
        #expect(!start)
        let first = schedule.passEnded(succeeded: true)
        #expect(first.resume.isEmpty && first.another, "the flush came after this pass began")
        let forced = schedule.passBegins()
        #expect(forced, "a waiter forces its pass")
        let end = schedule.passEnded(succeeded: false)
        #expect(end.resume == ["f"] && !end.another)
        #expect(schedule.flushWaiterCount == 0)
    }

    // MARK: - Pause and stop

    @Test("W6: a pause waits for the pass in flight, keeps its flush for the pass after the resume")
    func pauseKeepsTheFlush() {
        var schedule = Self.schedule()
        _ = schedule.trigger(.init(force: false))
        _ = schedule.flush("f", force: true)
        let carriedForced = schedule.passBegins()
        let paused = schedule.pause("p")
        #expect(carriedForced)
        #expect(paused == nil, "kept until the pass ends")
        #expect(!schedule.passMayContinue, "the pass ends after its request in flight")
        let end = schedule.passEnded(succeeded: true)
        #expect(end.resume.isEmpty && !end.another && end.passWaiters == ["p"])
        let whilePaused = schedule.trigger(.init(force: false))
        #expect(!whilePaused, "paused: owed to the resume")
        let resumed = schedule.resume()
        #expect(resumed == .init(force: false))
        let started = schedule.trigger(.init(force: false))
        let forced = schedule.passBegins()
        #expect(started && forced, "the kept flush forces the pass after the resume")
        let after = schedule.passEnded(succeeded: true)
        #expect(after.resume == ["f"])
    }

    @Test("W1: a pass that fails while paused gives its flush the failure, not a wait")
    func failedPassWhilePaused() {
        var schedule = Self.schedule()
        _ = schedule.flush("f", force: true)
        _ = schedule.passBegins()
        _ = schedule.pause("p")
        let end = schedule.passEnded(succeeded: false)
        #expect(end.resume == ["f"] && end.passWaiters == ["p"])
        let resumed = schedule.resume()
        #expect(resumed == nil, "nothing owed")
    }

    @Test("a pause while idle returns at once, and two pauses need two resumes")
    func nestedPauses() {
        var schedule = Self.schedule()
        let returned = [schedule.pause("a"), schedule.pause("b")]
        #expect(returned == ["a", "b"])
        let started = schedule.trigger(.init(force: false))
        #expect(!started)
        let resumes = [schedule.resume(), schedule.resume(), schedule.resume()]
        #expect(resumes == [nil, .init(force: false), nil], "two holds, two resumes; an extra one is harmless")
    }

    @Test("stop fails the waiters no pass carries, waits for the pass in flight, and takes nothing more")
    func stopEndsEverything() {
        var schedule = Self.schedule()
        _ = schedule.flush("carried", force: true)
        _ = schedule.passBegins()
        _ = schedule.flush("waiting", force: true)
        let generation = schedule.retryGeneration
        let stop = schedule.stop("s")
        #expect(stop.failing == ["waiting"] && stop.resumeNow == nil)
        #expect(schedule.retryGeneration > generation, "the retry timer is cancelled")
        guard case .closed("late") = schedule.flush("late", force: true) else {
            Issue.record("a flush after stop was kept")
            return
        }
        let started = schedule.trigger(.init(force: true))
        #expect(!started)
        let end = schedule.passEnded(succeeded: true)
        #expect(end.resume == ["carried"] && !end.another && end.passWaiters == ["s"])
        #expect(schedule.flushWaiterCount == 0 && schedule.passWaiterCount == 0 && !schedule.running)
        let again = schedule.stop("again")
        #expect(again.resumeNow == "again", "a second stop returns at once")
    }

    // MARK: - Backoff

    @Test("D1: a failure backs off, only the live retry timer ends it, and a success starts over")
    func backoff() {
        var schedule = Self.schedule()
        let first = schedule.failed("down", retryAfter: nil, now: 100)
        #expect(first.delay == 1 && schedule.retryAt == 101)
        let second = schedule.failed("down", retryAfter: nil, now: 101)
        #expect(second.delay == 2 && second.generation > first.generation)
        #expect(schedule.gate(force: false, now: 102) == .endPass, "backing off")
        #expect(schedule.gate(force: true, now: 102) == .go, "a flush tries at once")
        let stale = schedule.retryDue(generation: first.generation, pending: true)
        #expect(stale == nil, "replaced")
        #expect(schedule.retryAt == 103)
        let live = schedule.retryDue(generation: second.generation, pending: true)
        #expect(live == .init(force: false))
        #expect(schedule.retryAt == nil && schedule.gate(force: false, now: 102) == .go)
        _ = schedule.failed("refused", retryAfter: 30, heldBack: true, now: 200)
        #expect(schedule.retryAt == 230 && schedule.heldBack == "refused" && schedule.failures == 3)
        #expect(schedule.nextRetry(now: 210) == 20)
        schedule.recovered()
        #expect(schedule.failures == 0 && schedule.retryAt == nil && schedule.heldBack == nil)
        #expect(schedule.lastFailure == nil)
    }

    @Test("another process's lease: retry when it expires, within a lease, keeping the backoff")
    func leaseHeldElsewhere() {
        var schedule = Self.schedule()
        _ = schedule.failed("down", retryAfter: nil, now: 0)
        let delays = [
            schedule.leaseHeldElsewhere(until: 50, now: 10), schedule.leaseHeldElsewhere(until: 10_000, now: 10),
            schedule.leaseHeldElsewhere(until: 5, now: 10),
        ].map(\.delay)
        #expect(delays == [40, 90, 1])
        #expect(schedule.retryAt == 1 && schedule.failures == 1)
    }

    // MARK: - What holds uploads back

    @Test("W2: without a path or on a metered one under the policy, passes end; a flush hears the policy")
    func gates() {
        var schedule = Self.schedule(policy: .unmeteredOnly)
        let offline = schedule.networkChanged(.init(usable: false, metered: false), pending: true)
        #expect(offline == nil)
        #expect(schedule.gate(force: false, now: 0) == .endPass)
        #expect(schedule.gate(force: true, now: 0) == .go, "a flush tries without a path")
        _ = schedule.failed("down", retryAfter: nil, now: 0)
        let metered = schedule.networkChanged(.init(usable: true, metered: true), pending: true)
        #expect(metered == nil)
        #expect(schedule.gate(force: true, now: 0) == .refuse(Schedule.meteredReason))
        let generation = schedule.retryGeneration
        let unmetered = schedule.networkChanged(.init(usable: true, metered: false), pending: true)
        #expect(unmetered == .init(force: false))
        #expect(schedule.retryAt == nil && schedule.retryGeneration > generation, "the backoff was for the path")
        let allowedBefore = schedule.setPolicy(.always, pending: true)
        #expect(allowedBefore == nil, "allowed before")
        _ = schedule.networkChanged(.init(usable: true, metered: true), pending: true)
        let changes = [
            schedule.setPolicy(.unmeteredOnly, pending: true), schedule.setPolicy(.always, pending: true),
            schedule.setPolicy(.unmeteredOnly, pending: false), schedule.setPolicy(.always, pending: false),
        ]
        #expect(
            changes == [nil, .init(force: false), nil, nil],
            "allowed again, what waits goes; nothing waits, nothing goes")
        #expect(schedule.pausedInDatabase(force: true) == .refuse(Schedule.pausedReason))
        #expect(schedule.pausedInDatabase(force: false) == .endPass)
    }
}
