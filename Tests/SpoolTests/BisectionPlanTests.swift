import Foundation
import Testing

@testable import Spool

/// Bisection without HTTP or SQLite: `BisectionPlan` is a value, and each
/// test plays a collector against it (`Collector` below) and checks the
/// requests it asks for, the outcomes and the verdict. A request is named by
/// the positions it carries.
struct BisectionPlanTests {
    typealias Plan = BisectionPlan<[Int64]>

    /// A collector as the plan sees it: the log after the refused batch and
    /// an answer for each request.
    struct Collector {
        /// Events refused whenever a request carries one of them.
        var bad: Set<Int64> = []
        /// The status those requests get.
        var status = 400
        /// Refuse every request.
        var refuseAll = false
        /// The answer to the request with this index (from 0), whatever it carries.
        var answerAt: [Int: Uploader.Reading] = [:]
        /// Body size per event.
        var bytesPerEvent = 100
        /// The events after the refused batch, read a batch at a time.
        var following: [Int64] = []
        var batchSize = 4
        /// Every request, in order.
        var requests: [[Int64]] = []

        mutating func answer(_ positions: [Int64]) -> Uploader.Reading {
            defer { requests.append(positions) }
            if let reading = answerAt[requests.count] { return reading }
            if refuseAll || positions.contains(where: bad.contains) {
                return .eventsRefused("HTTP \(status)", status: status, singled: false)
            }
            return .accepted
        }

        /// Runs the plan to its end (bounded: a plan that never finishes fails).
        mutating func run(_ plan: inout Plan) -> Plan.Finish? {
            var action = plan.start()
            for _ in 0..<1_000 {
                switch action {
                case .probe(let positions):
                    let reading = answer(positions)
                    action = plan.probed(
                        .sent(
                            positions, bytes: positions.count * bytesPerEvent, reading: reading, request: positions))
                case .readFollowing(let after):
                    let next = Array(following.drop { $0 <= after }.prefix(batchSize))
                    action = plan.followed(next.isEmpty ? .nothing : .batch(next))
                case .finish(let finish):
                    return finish
                }
            }
            Issue.record("the plan did not finish")
            return nil
        }
    }

    static func plan(_ positions: [Int64], status: Int = 400, bytes: Int? = nil, largestAccepted: Int = 0) -> Plan {
        Plan(
            positions: positions, status: status, reason: "HTTP \(status)", bytes: bytes ?? positions.count * 100,
            largestAcceptedBody: largestAccepted, budget: Uploader.bisectionBudget(positions.count))
    }

    static func dead(_ finish: Plan.Finish) -> Set<Int64> {
        Set(finish.outcomes.compactMap { if case .rejected = $0.value { $0.key } else { nil } })
    }

    static func accepted(_ finish: Plan.Finish) -> Set<Int64> {
        Set(finish.outcomes.compactMap { if case .accepted = $0.value { $0.key } else { nil } })
    }

    /// Log order: each request after another is either one of its halves or
    /// wholly after it (a left half settled before the right half is sent).
    static func inLogOrder(_ requests: [[Int64]]) -> Bool {
        zip(requests, requests.dropFirst()).allSatisfy { earlier, later in
            guard let first = later.first, let last = earlier.last else { return false }
            return Set(later).isSubset(of: earlier) || first > last
        }
    }

    // MARK: - Bad events

    @Test(
        "C3: one bad event first, in the middle or last of 16: only it is dead-lettered, requests in log order",
        arguments: [Int64(0), 5, 8, 15])
    func oneBadEvent(_ bad: Int64) throws {
        let batch = Array(Int64(0)..<16)
        var plan = Self.plan(batch)
        var collector = Collector(bad: [bad])
        let ran = collector.run(&plan)
        let finish = try #require(ran)
        #expect(Self.dead(finish) == [bad])
        #expect(Self.accepted(finish) == Set(batch).subtracting([bad]))
        #expect(finish.verdict == .settled)
        // Refused before anything was accepted (first): sent alone once more, at the end.
        let exploration = bad == 0 ? Array(collector.requests.dropLast()) : collector.requests
        #expect(Self.inLogOrder(exploration), "\(collector.requests)")
        if bad == 0 { #expect(collector.requests.last == [0]) }
        #expect(exploration.count == 2 * 4, "two requests per level of log2(16): \(collector.requests)")
        let last = try #require(finish.notes.last { $0.positions == [bad] })
        #expect(last.outcome == .deadLettered, "the result of its request says it was dead-lettered")
    }

    @Test(
        "C3: two bad events, adjacent or apart: exactly both are dead-lettered",
        arguments: [[Int64(1), 2], [3, 12], [0, 15]])
    func twoBadEvents(_ bad: [Int64]) throws {
        let batch = Array(Int64(0)..<16)
        var plan = Self.plan(batch)
        var collector = Collector(bad: Set(bad))
        let ran = collector.run(&plan)
        let finish = try #require(ran)
        #expect(Self.dead(finish) == Set(bad))
        #expect(Self.accepted(finish).count == 14)
        #expect(finish.verdict == .settled)
        #expect(finish.positions == batch)
    }

    @Test("C3: requests are in log order: a left half is settled before its right half is sent")
    func logOrder() throws {
        let batch = Array(Int64(10)..<42)
        var plan = Self.plan(batch)
        var collector = Collector(bad: [13, 14, 30, 41])
        let ran = collector.run(&plan)
        let finish = try #require(ran)
        #expect(Self.dead(finish) == [13, 14, 30, 41])
        #expect(Self.inLogOrder(collector.requests), "\(collector.requests)")
        #expect(finish.notes.map(\.request) == collector.requests, "a note per request, in order")
    }

    // MARK: - No evidence

    @Test("C3: every event refused: nothing dead-lettered, the budget spent, held back")
    func everythingRefused() throws {
        let batch = Array(Int64(0)..<16)
        var plan = Self.plan(batch)
        var collector = Collector(refuseAll: true, following: Array(16..<40))
        let ran = collector.run(&plan)
        let finish = try #require(ran)
        #expect(Self.dead(finish).isEmpty && Self.accepted(finish).isEmpty)
        #expect(collector.requests.count == Uploader.bisectionBudget(16), "\(collector.requests)")
        #expect(plan.budget == 0)
        #expect(
            finish.verdict
                == .holdBack(
                    "HTTP 400: refused the same way whichever of its events were sent, so none is singled out",
                    retryAfter: nil))
        #expect(Self.inLogOrder(collector.requests))
    }

    @Test(
        "C3: one event refused alone, then the batch after it accepted: the event is sent alone again and dead-lettered"
    )
    func evidenceFromTheFollowingBatch() throws {
        var plan = Self.plan([7])
        var collector = Collector(bad: [7], following: [8, 9, 10, 11, 12, 13], batchSize: 4)
        let ran = collector.run(&plan)
        let finish = try #require(ran)
        #expect(collector.requests == [[8, 9, 10, 11], [7]], "the batch after it, then the re-check")
        #expect(Self.dead(finish) == [7])
        #expect(Self.accepted(finish) == [8, 9, 10, 11])
        #expect(finish.positions == [7, 8, 9, 10, 11], "the following batch is settled with it, in log order")
        #expect(finish.verdict == .settled)
    }

    @Test("C3: one event refused alone, and nothing after it: held back, not dead-lettered")
    func noEvidenceAtAll() throws {
        var plan = Self.plan([7])
        var collector = Collector(bad: [7])
        let ran = collector.run(&plan)
        let finish = try #require(ran)
        #expect(collector.requests.isEmpty)
        #expect(Self.dead(finish).isEmpty)
        guard case .holdBack = finish.verdict else {
            Issue.record("\(finish.verdict)")
            return
        }
    }

    @Test("C3: refused alone before evidence, accepted when sent alone again: not dead-lettered")
    func recheckAccepted() throws {
        var plan = Self.plan([0, 1])
        // [0] refused, [1] accepted, the re-check of [0] accepted.
        var collector = Collector(answerAt: [0: .eventsRefused("HTTP 400", status: 400, singled: false)])
        let ran = collector.run(&plan)
        let finish = try #require(ran)
        #expect(collector.requests == [[0], [1], [0]])
        #expect(Self.dead(finish).isEmpty)
        #expect(Self.accepted(finish) == [0, 1])
        #expect(finish.notes.first?.outcome == .heldBack, "refused alone, then not singled out")
    }

    // MARK: - Stops

    @Test("C3: a transient failure mid-way stops the bisection: what was accepted is settled, the rest backs off")
    func transientMidWay() throws {
        let batch = Array(Int64(0)..<8)
        var plan = Self.plan(batch)
        var collector = Collector(bad: [6], answerAt: [2: .transient("HTTP 503", retryAfter: 30, status: 503)])
        let ran = collector.run(&plan)
        let finish = try #require(ran)
        // [0-3] accepted, [4-7] refused, [4,5] answered 503.
        #expect(collector.requests == [[0, 1, 2, 3], [4, 5, 6, 7], [4, 5]])
        #expect(Self.accepted(finish) == [0, 1, 2, 3])
        #expect(Self.dead(finish).isEmpty)
        #expect(finish.verdict == .backOff("HTTP 503", retryAfter: 30))
        #expect(finish.notes.map(\.outcome) == [.accepted, .bisected, .retried])
    }

    @Test(
        "C3: a transient failure after an event was refused alone, once others were accepted: it is dead-lettered, and the accepted after it settled"
    )
    func transientAfterEvidence() throws {
        // The batch is refused for 1; the right half's answer is lost.
        var plan = Self.plan(Array(Int64(0)..<8))
        var collector = Collector(bad: [1], answerAt: [5: .transient("no answer", retryAfter: nil, status: nil)])
        let ran = collector.run(&plan)
        let finish = try #require(ran)
        #expect(collector.requests == [[0, 1, 2, 3], [0, 1], [0], [1], [2, 3], [4, 5, 6, 7]])
        #expect(Self.dead(finish) == [1], "refused alone after 0 was accepted: the evidence holds")
        #expect(Self.accepted(finish) == [0, 2, 3])
        #expect(finish.outcomes[4] == nil, "the lost half waits")
        #expect(finish.verdict == .backOff("no answer", retryAfter: nil))
    }

    @Test("C2, C3: a refusal of the request mid-way holds the rest back with its reason")
    func requestRefusedMidWay() throws {
        var plan = Self.plan(Array(Int64(0)..<8))
        var collector = Collector(answerAt: [1: .requestRefused("HTTP 401", retryAfter: nil, status: 401)])
        let ran = collector.run(&plan)
        let finish = try #require(ran)
        #expect(collector.requests.count == 2)
        #expect(finish.verdict == .holdBack("HTTP 401", retryAfter: nil))
    }

    // MARK: - Size

    @Test("C3: a 413 to one event larger than a body accepted earlier is dead-lettered by its size")
    func payloadTooLargeDecidedBySize() throws {
        var plan = Self.plan([3], status: 413, bytes: 5_000, largestAccepted: 1_000)
        var collector = Collector(status: 413, refuseAll: true)
        let ran = collector.run(&plan)
        let finish = try #require(ran)
        #expect(Self.dead(finish) == [3])
        #expect(finish.verdict == .settled)

        var smaller = Self.plan([3], status: 413, bytes: 500, largestAccepted: 1_000)
        let keptRun = collector.run(&smaller)
        let kept = try #require(keptRun)
        #expect(Self.dead(kept).isEmpty, "no larger than what was accepted: not singled out by its size")
        var unknown = Self.plan([3], status: 413, bytes: 5_000, largestAccepted: 0)
        let unknownRun = collector.run(&unknown)
        #expect(Self.dead(try #require(unknownRun)).isEmpty, "nothing accepted yet to compare with")
    }

    // MARK: - The log under the bisection

    @Test("C4: events the queue bound deleted meanwhile are dropped, never sent or dead-lettered")
    func droppedMeanwhile() throws {
        var plan = Self.plan([0, 1, 2, 3])
        guard case .probe(let left) = plan.start() else {
            Issue.record("no probe")
            return
        }
        #expect(left == [0, 1])
        guard case .probe(let right) = plan.probed(.nothing) else {
            Issue.record("no probe")
            return
        }
        // Of [2, 3] only 3 is still in the log, and accepted.
        guard case .finish(let finish) = plan.probed(.sent([3], bytes: 100, reading: .accepted, request: [3])) else {
            Issue.record("not finished")
            return
        }
        #expect(right == [2, 3])
        guard case .dropped? = finish.outcomes[0], case .dropped? = finish.outcomes[2] else {
            Issue.record("\(finish.outcomes)")
            return
        }
        #expect(Self.accepted(finish) == [3])
        #expect(finish.verdict == .settled)
    }
}
