import Foundation
import Spool
import SpoolStorage

/// EVENT_FREQUENCY over a history of 1M occurrences, and what registered
/// surveys add to `record` until delivered; filters, sequences and their
/// overhead in `HistoryBenchmarks+Targeting.swift`.
struct HistoryBenchmarks {
    let quick: Bool
    let report: Report

    /// An engine whose history holds 1M occurrences over 100 event names,
    /// recorded through the real record path (a history row counts one
    /// name's occurrences in one millisecond), and its history's row count.
    func historyEngine() async throws -> (engine: EventEngine, scratch: Scratch, historyRows: Int) {
        let scratch = Scratch("history")
        let engine = EventEngine(
            configuration: EngineConfiguration(database: .file(scratch.database), maximumRetainedEvents: 1_000))
        try await engine.start()
        let rows = 1_000_000
        let names = (0..<100).map { "event_\($0)" }
        for index in 0..<rows {
            try engine.recordRetrying(names[index % names.count], parameters: ["i": .int(index)])
            if index % 50_000 == 49_999 { try await engine.settle() }
        }
        try await engine.settle()
        checkpointAndTruncateWAL(scratch.database)
        let historyRows = try await engine.databaseQueue!.run { try $0.historyRowCount() }
        return (engine, scratch, historyRows)
    }

    /// The filtered rules' overhead alone (`--phase targeting`), for a profiler.
    func targeting() async throws {
        let (engine, scratch, _) = try await historyEngine()
        try await filteredRulesOverhead(engine)
        await engine.close()
        withExtendedLifetime(scratch) {}
    }

    func run() async throws {
        let (engine, scratch, historyRows) = try await historyEngine()
        defer { withExtendedLifetime(scratch) {} }

        let cases: [(String, SurveyCondition)] = [
            ("at least 3 in the last 30 days", .eventFrequency(EventFrequency("event_7", .atLeast, 3, in: .days(30)))),
            ("at most 5, ever", .eventFrequency(EventFrequency("event_7", .atMost, 5))),
            (
                "exactly 10000, ever (counts every row of the name)",
                .eventFrequency(EventFrequency("event_7", .exactly, 10_000))
            ),
            (
                "all of three rules",
                .all([
                    .eventFrequency(EventFrequency("event_1", .atLeast, 1, in: .days(7))),
                    .eventFrequency(EventFrequency("event_2", .atMost, 100_000)),
                    .eventFrequency(EventFrequency("survey_completed", .exactly, 0)),
                ])
            ),
        ]
        for (index, (label, condition)) in cases.enumerated() {
            let samples = Samples(
                values: try await measureEvaluation(condition, times: quick ? 500 : 10_000, in: engine)
                    .map {
                        Double($0) / 1_000
                    })
            report.add(
                Row(
                    area: "history", name: "EVENT_FREQUENCY over 1M occurrences: \(label)", value: samples.median,
                    unit: "µs", detail: "p99 \(formatNumber(samples.percentile(0.99))) µs; \(historyRows) history rows",
                    target: index == 0 ? 100 : nil, comparison: index == 0 ? .atMost : nil))
        }
        // Through the public async API (one hop to the database queue and back).
        var api: [Double] = []
        let condition = cases[0].1
        for _ in 0..<(quick ? 200 : 2_000) {
            let start = now()
            blackHole(try await engine.surveys.evaluate(condition))
            api.append(Double(now() - start) / 1_000)
        }
        report.add(
            Row(
                area: "history", name: "surveys.evaluate(…) round trip, same rule", value: Samples(values: api).median,
                unit: "µs", detail: "includes the hop to the database queue"))

        try await sequenceRows(engine, historyRows: historyRows)

        // Trigger matching, through the real path (record, commit, conditions
        // counted in the group's transaction, delivery): 100 surveys (90 on
        // named triggers, 10 wildcard), events over 200 names; then with 10
        // of them carrying a frequency rule (one a wildcard, so counted at
        // every event); then 100 wildcard surveys, each with a rule; last a
        // burst of one name with a rule on that name, whose history is
        // already past the rule's N (each event's count must not scan the
        // history again).
        let events = quick ? 50_000 : 200_000
        let triggered = Locked(0)
        let registration = engine.surveys.onTrigger { _ in triggered.withLock { $0 += 1 } }
        let setups: [(label: String, names: Int, surveys: [Survey])] = [
            (
                "100 surveys", 200,
                (0..<100).map { Survey(id: "survey_\($0)", triggerEventNames: $0 < 90 ? ["event_\($0)"] : nil) }
            ),
            (
                "100 surveys, 10 rules", 200,
                (0..<100).map { index in
                    Survey(
                        id: "survey_\(index)", triggerEventNames: index < 90 ? ["event_\(index)"] : nil,
                        conditions: index % 10 == 3
                            ? .eventFrequency(EventFrequency("event_\(index)", .atLeast, 2, in: .days(1))) : .always)
                }
            ),
            (
                "100 wildcard surveys, a rule each", 200,
                (0..<100).map { index in
                    Survey(
                        id: "survey_\(index)",
                        conditions: .eventFrequency(EventFrequency("event_\(index % 10)", .atLeast, index)))
                }
            ),
            (
                "one name, a rule on it past its N", 1,
                [Survey(id: "hot", conditions: .eventFrequency(EventFrequency("event_0", .atLeast, 1_000)))]
            ),
        ]
        // Recording with no survey, per number of names.
        var baselines: [Int: Double] = [:]
        for setup in setups {
            for survey in engine.surveys.registered { engine.surveys.unregister(survey.id) }
            if baselines[setup.names] == nil {
                baselines[setup.names] = try await recordCost(engine, events: events, names: setup.names)
            }
            let baseline = baselines[setup.names]!
            for survey in setup.surveys { try engine.surveys.register(survey) }
            triggered.withLock { $0 = 0 }
            let cost = try await recordCost(engine, events: events, names: setup.names)
            report.add(
                Row(
                    area: "history", name: "record until delivered, \(setup.label), added per event",
                    value: cost - baseline, unit: "µs",
                    detail:
                        "\(triggered.withLock { $0 }) triggers for \(events) events\(setup.names == 1 ? " of event_0" : ""); \(formatNumber(baseline)) µs per event with no survey"
                ))
        }
        try await filteredRulesOverhead(engine)
        registration.cancel()
        await engine.close()
        try await filteredFrequencyRows()
    }

    /// Per-event cost of recording `events` events (over `names` names)
    /// until they are committed and delivered.
    func recordCost(_ engine: EventEngine, events: Int, names: Int = 200) async throws -> Double {
        let start = now()
        for index in 0..<events { try engine.recordRetrying("event_\(index % names)", parameters: ["i": 1]) }
        try await engine.settle()
        return Double(now() - start) / Double(events) / 1_000
    }
}
