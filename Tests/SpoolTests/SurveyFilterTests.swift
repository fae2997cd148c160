import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// S7 and S15 (docs/BEHAVIOUR.md): property filters over the values the
/// history keeps, and the bounds, erasure and consent rules those values
/// follow.
struct SurveyFilterTests {
    typealias TriggerLog = SurveyTests.TriggerLog

    /// A survey that keeps `purchase`'s `amount`, `plan` and `tags`.
    static let keeper = Survey(
        id: "keeper", triggerEventNames: ["never"], historyProperties: ["purchase": ["amount", "plan", "tags"]])

    static func frequency(
        _ comparison: EventFrequency.Comparison, _ count: Int, _ property: String, _ match: ValueMatch,
        in window: EventFrequency.Window = .ever
    ) -> SurveyCondition {
        .eventFrequency(EventFrequency("purchase", comparison, count, in: window, where: .property(property, match)))
    }

    @Test("S7: a filtered frequency counts the occurrences whose declared property passes each test")
    func filtersOverKeptValues() async throws {
        let engine = try await startedEngine()
        try engine.surveys.register(Self.keeper)
        let purchases: [[String: EventValue]] = [
            ["amount": 10, "plan": "free"],
            ["amount": 60, "plan": "pro"],
            ["amount": 60.0, "plan": "pro team"],
            ["amount": 75.5, "plan": .bool(true), "note": "not declared"],
            ["amount": "a lot", "plan": .date(Date(timeIntervalSince1970: 0))],
            ["amount": .null, "tags": ["sale"]],
            [:],
        ]
        for parameters in purchases { try engine.record("purchase", parameters: parameters) }
        try await engine.settle()
        func count(_ property: String, _ match: ValueMatch) async throws -> Int {
            for count in 0...purchases.count {
                if try await engine.surveys.evaluate(Self.frequency(.exactly, count, property, match)) { return count }
            }
            return -1
        }
        #expect(try await count("amount", .equals(60)) == 2, "an integer and a double with its value are equal")
        #expect(try await count("amount", .equals(60.0)) == 2)
        #expect(try await count("amount", .equals("60")) == 0, "text never equals a number")
        #expect(try await count("amount", .notEquals(60)) == 3, "present and different: 10, 75.5, \"a lot\"")
        #expect(try await count("amount", .greaterThan(50)) == 3, "numbers only: 60, 60.0, 75.5")
        #expect(try await count("amount", .lessThan(60)) == 1)
        #expect(try await count("amount", .greaterThan(100)) == 0)
        #expect(try await count("amount", .exists) == 5, "null and missing are not kept")
        #expect(try await count("plan", .contains("pro")) == 2)
        #expect(try await count("plan", .contains("1970")) == 1, "a date compares as its ISO 8601 text")
        #expect(try await count("plan", .equals(true)) == 1, "a Boolean is kept as 1")
        #expect(try await count("plan", .equals(1)) == 1, "so it equals the number 1")
        #expect(try await count("tags", .exists) == 0, "arrays are not kept")
        // Only what a survey declared is in the table.
        let properties = try await engine.query { connection in
            try connection.scalarString(
                "SELECT group_concat(DISTINCT property) FROM (SELECT property FROM event_history_values ORDER BY property)"
            )
        }
        #expect(properties == "amount,plan")
        await engine.close()
    }

    @Test("S7: at an event, a filtered rule counts up to that event, in log order, also within one millisecond")
    func filteredCountsStopAtTheEvent() async throws {
        let triggers = TriggerLog()
        let engine = try await startedEngine()
        engine.surveys.onTrigger { trigger in triggers.triggers.withLock { $0.append(trigger) } }
        try engine.surveys.register(
            Survey(
                id: "big", triggerEventNames: ["purchase"],
                conditions: Self.frequency(.exactly, 50, "amount", .greaterThan(50)),
                historyProperties: ["purchase": ["amount"]]))
        try engine.surveys.register(
            Survey(
                id: "atLeast", triggerEventNames: ["purchase"],
                conditions: Self.frequency(.atLeast, 70, "amount", .notEquals(0), in: .days(1)),
                historyProperties: ["purchase": ["amount"]]))
        // A tight loop: many share a millisecond, so a row that already
        // counts the ones after each. Every other purchase is above 50.
        for index in 0..<200 {
            try engine.record("purchase", parameters: ["i": .int(index), "amount": .int(index % 2 * 100)])
        }
        try await engine.settle()
        let fired = triggers.triggers.withLock { $0.map { ($0.surveyID, $0.event.parameters["i"]) } }
        // The 50th above 50 is the 100th purchase; the 101st (0) leaves it at 50.
        #expect(fired.filter { $0.0 == "big" }.map(\.1) == [.int(99), .int(100)])
        #expect(fired.filter { $0.0 == "atLeast" }.map(\.1) == (139..<200).map { .int($0) })
        let explanation = try #require(triggers.triggers.withLock { $0.first { $0.surveyID == "big" } }).explanation
        #expect(explanation.verdict.observation == .occurrences(50, orMore: false))
        await engine.close()
    }

    @Test("S7: a survey registered later sees the values recorded from then on, not before")
    func valuesFromRegistrationOn() async throws {
        let engine = try await startedEngine()
        for _ in 0..<3 { try engine.record("purchase", parameters: ["amount": 80]) }
        try await engine.settle()
        try engine.surveys.register(Self.keeper)
        try engine.record("purchase", parameters: ["amount": 80])
        try await engine.settle()
        #expect(try await engine.surveys.evaluate(Self.frequency(.exactly, 1, "amount", .greaterThan(50))))
        #expect(try await engine.surveys.evaluate(.eventFrequency(EventFrequency("purchase", .exactly, 4))))
        // Unregistered: nothing more is kept.
        engine.surveys.unregister(Self.keeper.id)
        try engine.record("purchase", parameters: ["amount": 80])
        try await engine.settle()
        let kept = try await engine.query { try $0.scalarInt("SELECT sum(occurrences) FROM event_history_values") }
        #expect(kept == 1)
        await engine.close()
    }

    @Test("S7: the query docs/SCHEMA.md gives says why a survey showed", .needsChildProcesses)
    func documentedQuerySaysWhy() async throws {
        let sqlite3 = try #require(SQLiteCLITests.sqlite3, "install the sqlite3 CLI (apt-get install sqlite3)")
        let schema = try String(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("docs/SCHEMA.md"), encoding: .utf8)
        let query = try #require(
            schema.components(separatedBy: "```sql\n").dropFirst().map { $0.components(separatedBy: "```")[0] }
                .first { $0.contains("purchases_over_50") })
        let (directory, clock) = (TemporaryDirectory(), ManualClock())
        let engine = try await startedEngine(directory) { $0.clock = clock }
        try engine.surveys.register(
            Survey(
                id: "checkout", triggerEventNames: ["purchase"],
                conditions: Self.frequency(.atLeast, 3, "amount", .greaterThan(50), in: .days(30)),
                historyProperties: ["purchase": ["amount"], "survey_shown": ["survey_id"]]))
        let batches: [[EventValue]] = [[80, 20, 90.5, 70], [100, 51]]
        for amounts in batches {
            for amount in amounts {
                clock.advance(by: 1)
                try engine.record("purchase", parameters: ["amount": amount])
            }
            clock.advance(by: 1)
            try engine.surveys.mark(.shown, "checkout")
        }
        try await engine.settle()
        await engine.close()
        let result = try await runProcess(sqlite3, ["-bail", directory.databaseURL.path], input: query)
        #expect(result.status == 0 && result.error.isEmpty, "\(result.error)")
        let counts = result.output.split(separator: "\n").map { $0.split(separator: "|").last.map(String.init) }
        #expect(counts == ["3", "5"], "purchases over 50 before each time it showed")
    }

    @Test("S15: the kept values are bounded like the history, as events commit and at start")
    func valuesAreBounded() async throws {
        let directory = TemporaryDirectory()
        let configure: (inout EngineConfiguration) -> Void = {
            $0.maximumHistoryRows = 1_500
            $0.historyRetention = 30 * 86_400
        }
        let engine = try await startedEngine(directory, configure: configure)
        try engine.surveys.register(Self.keeper)
        // A value per event: each is a row of its own however fast they come.
        for index in 0..<6_000 { try engine.record("purchase", parameters: ["amount": .int(index)]) }
        try await engine.settle()
        let whileRunning = try await engine.query { try $0.historyValueRowCount() }
        #expect(whileRunning <= 1_500 + 1_024 + EventLog.maximumGroupSize, "pruned as it goes: \(whileRunning)")
        await engine.close()

        let restarted = try await startedEngine(directory, configure: configure)
        try restarted.surveys.register(Self.keeper)
        #expect(try await restarted.query { try $0.historyValueRowCount() } == 1_500, "the newest 1,500 kept at start")
        #expect(try await restarted.surveys.evaluate(Self.frequency(.exactly, 1, "amount", .equals(5_999))))
        #expect(try await restarted.surveys.evaluate(Self.frequency(.exactly, 0, "amount", .lessThan(4_500))))
        await restarted.close()

        // By age: a value recorded 45 days ago (so before the others: rows
        // are pruned in recording order) goes at the next start.
        let aging = TemporaryDirectory()
        let earlier = try DatabaseQueue(path: aging.databaseURL.path)
        try earlier.sync { connection in
            try connection.withStatement(
                "INSERT INTO event_history_values (name, property, value, recorded_at) VALUES ('purchase', 'amount', 1, ?)"
            ) {
                try $0.bind(Date().timeIntervalSince1970 - 45 * 86_400, at: 1)
                try $0.step()
            }
        }
        earlier.close()
        let aged = try await startedEngine(aging, configure: configure)
        try aged.surveys.register(Self.keeper)
        _ = try await aged.recordDurably("purchase", parameters: ["amount": 2])
        await aged.close()
        let reopened = try await startedEngine(aging, configure: configure)
        try reopened.surveys.register(Self.keeper)
        #expect(
            try await reopened.surveys.evaluate(Self.frequency(.exactly, 1, "amount", .exists)), "only the young one")
        await reopened.close()
    }

    @Test(
        "S15: erasure and a withdrawal that erases clear the kept values; a plain one keeps them; none without consent")
    func valuesFollowErasureAndConsent() async throws {
        let directory = TemporaryDirectory()
        let engine = try await startedEngine(directory)
        try engine.surveys.register(Self.keeper)
        func rows() async throws -> (history: Int, values: Int) {
            try await engine.query { connection in
                (
                    try connection.scalarInt("SELECT count(*) FROM event_history WHERE name = 'purchase'"),
                    try connection.scalarInt("SELECT count(*) FROM event_history_values")
                )
            }
        }
        _ = try await engine.recordDurably("purchase", parameters: ["amount": 70, "plan": "platinum-7f3a"])
        #expect(try await rows().values == 2)
        try await engine.withdrawConsent()
        #expect(try await rows().values == 2, "withdrawing consent keeps the history, and its values")
        try engine.record("purchase", parameters: ["amount": 90])
        try await engine.settle()
        #expect(try await rows().values == 2, "nothing is recorded without consent, so no value is kept")
        try await engine.withdrawConsent(erasingData: true)
        #expect(try await rows() == (0, 0))
        engine.setConsent(true)
        _ = try await engine.recordDurably("purchase", parameters: ["amount": 70])
        #expect(try await rows().values == 1)
        try await engine.eraseAllData()
        #expect(try await rows() == (0, 0))
        await engine.close()
        // Erased from the file, not just unlinked: secure_delete zeroes the pages.
        let bytes = try Data(contentsOf: directory.databaseURL)
        #expect(bytes.range(of: Data("platinum-7f3a".utf8)) == nil)
    }
}
