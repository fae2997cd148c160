import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Every ordering of `stop()`, `pause()` and `flush()` against the
/// uploader's rules (W1, W6): each ordered pair and each ordering of the
/// three, from an idle uploader, one whose passes' task has not run yet,
/// and one with a pass in flight; with passes' tasks running between the
/// calls or only at the end. `ScheduleDriver` performs the schedule's
/// actions as `Uploader` does, and records who was resumed when.
struct UploadScheduleInterleavingTests {
    enum Call: String, CaseIterable, Sendable {
        case stop, pause, flush
    }

    enum Start: String, CaseIterable, Sendable {
        /// No pass runs.
        case idle
        /// A trigger started the passes; their task has not begun one.
        case started
        /// A pass is in flight.
        case inFlight
    }

    struct Interleaving: Sendable, CustomTestStringConvertible {
        var calls: [Call]
        var start: Start
        /// Passes' tasks begin their pass right after each call (else only
        /// once the calls are made).
        var eager: Bool

        var testDescription: String {
            calls.map(\.rawValue).joined(separator: ", ") + " from \(start.rawValue)" + (eager ? ", eager" : "")
        }

        static var all: [Interleaving] {
            let pairs = Call.allCases.flatMap { first in
                Call.allCases.filter { $0 != first }.map { [first, $0] }
            }
            let triples = pairs.map { pair in pair + Call.allCases.filter { !pair.contains($0) } }
            return (pairs + triples).flatMap { calls in
                Start.allCases.flatMap { start in
                    [false, true].map { Interleaving(calls: calls, start: start, eager: $0) }
                }
            }
        }
    }

    /// Performs `UploadSchedule`'s actions as the uploader does: a pass
    /// begins when its task runs and ends when the test says.
    struct ScheduleDriver {
        var schedule = UploadSchedule<String, String>(retry: RetryPolicy(), leaseDuration: 90, policy: .always)
        /// The passes' task was started and has not begun its pass.
        var taskPending = false
        var passInFlight = false
        /// Each flush waiter's results, in order ("ok", "failed", "closed").
        var flushResults: [String: [String]] = [:]
        /// The stop and pause waiters resumed, each with whether a pass was
        /// still in flight then.
        var passWaitersResumed: [(label: String, passInFlight: Bool)] = []
        /// The passes' tasks started after the stop.
        var startedAfterStop = 0
        var stopped = false
        /// Flush waiters issued while a pause held, and resumed before the
        /// resume.
        var resumedWhilePaused: [String] = []
        var pausedFlushes: Set<String> = []

        mutating func trigger(force: Bool) {
            guard schedule.trigger(.init(force: force)) else { return }
            if stopped { startedAfterStop += 1 }
            taskPending = true
        }

        mutating func beginPass() {
            guard taskPending else { return }
            taskPending = false
            _ = schedule.passBegins()
            passInFlight = true
        }

        mutating func endPass(succeeded: Bool = true) {
            guard passInFlight else { return }
            let end = schedule.passEnded(succeeded: succeeded)
            for waiter in end.resume { resumeFlush(waiter, succeeded ? "ok" : "failed") }
            if end.another {
                taskPending = true
                passInFlight = false
                beginPass()
                return
            }
            passInFlight = false
            for waiter in end.passWaiters { passWaitersResumed.append((waiter, false)) }
        }

        mutating func resumeFlush(_ waiter: String, _ result: String) {
            flushResults[waiter, default: []].append(result)
            if pausedFlushes.contains(waiter), schedule.pauses > 0, result == "ok" { resumedWhilePaused.append(waiter) }
        }

        mutating func call(_ call: Call, label: String) {
            switch call {
            case .flush:
                if schedule.pauses > 0 { pausedFlushes.insert(label) }
                switch schedule.flush(label, force: true) {
                case .closed(let waiter): resumeFlush(waiter, "closed")
                case .kept(let start):
                    if start {
                        if stopped { startedAfterStop += 1 }
                        taskPending = true
                    }
                }
            case .pause:
                if let now = schedule.pause(label) { passWaitersResumed.append((now, passInFlight || taskPending)) }
            case .stop:
                stopped = true
                let stop = schedule.stop(label)
                for waiter in stop.failing { resumeFlush(waiter, "closed") }
                if let now = stop.resumeNow { passWaitersResumed.append((now, passInFlight || taskPending)) }
            }
        }

        /// Runs the passes until none is owed.
        mutating func settle() {
            var rounds = 0
            while (taskPending || passInFlight) && rounds < 100 {
                beginPass()
                endPass()
                rounds += 1
            }
        }
    }

    @Test(
        "W1, W6: stop, pause and flush in every order: each waiter resumes once, when its pass allows",
        arguments: Interleaving.all)
    func everyOrdering(_ interleaving: Interleaving) {
        var driver = ScheduleDriver()
        switch interleaving.start {
        case .idle: break
        case .started: driver.trigger(force: false)
        case .inFlight:
            driver.trigger(force: false)
            driver.beginPass()
        }
        var pauses = 0
        for (index, call) in interleaving.calls.enumerated() {
            driver.call(call, label: "\(call.rawValue)\(index)")
            if call == .pause { pauses += 1 }
            if interleaving.eager { driver.beginPass() }
        }
        driver.settle()
        // The pause's work is done (an erasure, a withdrawal): it resumes.
        for _ in 0..<pauses {
            if let trigger = driver.schedule.resume() { driver.trigger(force: trigger.force) }
        }
        driver.settle()

        let flushes = interleaving.calls.enumerated().filter { $0.element == .flush }.map { "flush\($0.offset)" }
        for flush in flushes {
            let results = driver.flushResults[flush] ?? []
            #expect(results.count == 1, "\(flush) resumed \(results.count) times: none lost, none twice")
            if !interleaving.calls.contains(.stop) {
                #expect(results == ["ok"], "with no stop a flush's pass runs, after the resume if paused")
            }
        }
        #expect(driver.resumedWhilePaused.isEmpty, "a flush issued while paused waits for the resume")
        let passCallers = interleaving.calls.enumerated().filter { $0.element != .flush }.map {
            "\($0.element)\($0.offset)"
        }
        #expect(
            driver.passWaitersResumed.map(\.label).sorted() == passCallers.sorted(), "each stop and pause returns once")
        #expect(!driver.passWaitersResumed.contains { $0.passInFlight }, "none returns while a pass is in flight")
        #expect(driver.schedule.flushWaiterCount == 0 && driver.schedule.passWaiterCount == 0)
        #expect(!driver.taskPending && !driver.passInFlight && !driver.schedule.running, "no pass is owed once settled")
        if interleaving.calls.contains(.stop) {
            #expect(driver.startedAfterStop == 0, "a stop starts nothing more")
            let started = driver.schedule.trigger(.init(force: true))
            #expect(!started)
            if let stop = interleaving.calls.firstIndex(of: .stop) {
                for flush in flushes where Int(flush.dropFirst(5)) ?? 0 > stop {
                    #expect(driver.flushResults[flush] == ["closed"], "a flush after stop is refused")
                }
            }
        }
    }

    @Test("the interleavings cover every ordered pair and every order of the three")
    func coverage() {
        let orders = Set(Interleaving.all.map { $0.calls.map(\.rawValue).joined(separator: ",") })
        #expect(orders.count == 12)
        #expect(Interleaving.all.count == 72)
    }
}
