import Foundation
import Spool
import SpoolStorage

/// Survey targeting over large histories: property filters over 1M
/// occurrences with 10 distinct values, sequences over the 1M-occurrence
/// history, and what surveys with filtered rules add to `record` beside
/// plain `record`.
extension HistoryBenchmarks {
    /// Sequences and the time since the last occurrence over `engine`'s
    /// history (1M occurrences over 100 names, recorded in one burst).
    func sequenceRows(_ engine: EventEngine, historyRows: Int) async throws {
        let cases: [(String, SurveyCondition, Double?)] = [
            (
                "event_1 then event_2 within a minute",
                .sequence(EventSequence("event_1", then: "event_2", within: .minutes(1))), 200
            ),
            (
                "event_1 then event_2 within a minute, not followed by event_3 within a second",
                .sequence(
                    EventSequence("event_1", then: "event_2", within: .minutes(1))
                        .notFollowed(by: "event_3", within: .last(seconds: 1))), 200
            ),
            (
                "event_1 then survey_completed within a minute (never matches)",
                .sequence(EventSequence("event_1", then: "survey_completed", within: .minutes(1))), nil
            ),
            ("time since the last event_7", .timeSinceLast(TimeSinceLast("event_7", .atLeast, 60)), nil),
        ]
        for (label, condition, target) in cases {
            let samples = Samples(
                values: try await measureEvaluation(condition, times: quick ? 500 : 10_000, in: engine).map {
                    Double($0) / 1_000
                })
            report.add(
                Row(
                    area: "history", name: "sequence over 1M occurrences: \(label)", value: samples.median, unit: "µs",
                    detail: "p99 \(formatNumber(samples.percentile(0.99))) µs; \(historyRows) history rows",
                    target: target, comparison: target == nil ? nil : .atMost))
        }
    }

    /// A filtered EVENT_FREQUENCY over 1M occurrences of one name whose
    /// declared property takes 10 values, recorded through the real path.
    func filteredFrequencyRows() async throws {
        let scratch = Scratch("history-values")
        let engine = EventEngine(
            configuration: EngineConfiguration(
                database: .file(scratch.database), maximumRetainedEvents: 1_000, maximumHistoryRows: nil))
        try engine.surveys.register(
            Survey(id: "keeper", triggerEventNames: ["never"], historyProperties: ["purchase": ["amount"]]))
        try await engine.start()
        let occurrences = 1_000_000
        for index in 0..<occurrences {
            try engine.recordRetrying("purchase", parameters: ["amount": .int((index % 10 + 1) * 10)])
            if index % 50_000 == 49_999 { try await engine.settle() }
        }
        try await engine.settle()
        checkpointAndTruncateWAL(scratch.database)
        let valueRows = try await engine.databaseQueue!.run { try $0.historyValueRowCount() }
        func amount(
            _ comparison: EventFrequency.Comparison, _ count: Int, _ match: ValueMatch, _ window: EventFrequency.Window
        )
            -> SurveyCondition
        {
            .eventFrequency(
                EventFrequency("purchase", comparison, count, in: window, where: .property("amount", match)))
        }
        let cases: [(String, SurveyCondition, Double?)] = [
            ("amount > 50, at least 3 in the last 30 days", amount(.atLeast, 3, .greaterThan(50), .days(30)), 100),
            ("amount equals 30, at most 5 in the last hour", amount(.atMost, 5, .equals(30), .hours(1)), 100),
            ("amount not 30, at least 10 ever", amount(.atLeast, 10, .notEquals(30), .ever), 100),
            ("amount > 1000 (no value passes), at least 1 ever", amount(.atLeast, 1, .greaterThan(1_000), .ever), 100),
            (
                "amount < 50, exactly 400000 ever (counts every row of 4 values)",
                amount(.exactly, 400_000, .lessThan(50), .ever), nil
            ),
        ]
        for (label, condition, target) in cases {
            let samples = Samples(
                values: try await measureEvaluation(condition, times: quick ? 500 : 10_000, in: engine).map {
                    Double($0) / 1_000
                })
            let detail = "\(valueRows) value rows, 10 distinct values"
            report.add(
                Row(
                    area: "history", name: "filtered EVENT_FREQUENCY over 1M occurrences: \(label), median",
                    value: samples.median, unit: "µs", detail: detail, target: target,
                    comparison: target == nil ? nil : .atMost))
            report.add(
                Row(
                    area: "history", name: "filtered EVENT_FREQUENCY over 1M occurrences: \(label), p99",
                    value: samples.percentile(0.99), unit: "µs", detail: detail, target: target,
                    comparison: target == nil ? nil : .atMost))
        }
        await engine.close()
    }

    /// `record` until delivered with 100 surveys whose rules filter on a
    /// declared property (90 on named triggers, 10 wildcards, so evaluated
    /// at every event), against plain `record` of the same events, round by
    /// round: rules that hold once, as targeting rules do (the target), and
    /// rules that hold at nearly every event, whose cost is the delivery of
    /// some 11 triggers per event.
    func filteredRulesOverhead(_ engine: EventEngine) async throws {
        for survey in engine.surveys.registered { engine.surveys.unregister(survey.id) }
        func surveys(_ comparison: EventFrequency.Comparison, _ count: Int) -> [Survey] {
            (0..<100).map { index in
                Survey(
                    id: "filtered_\(index)", triggerEventNames: index < 90 ? ["event_\(index)"] : nil,
                    conditions: .eventFrequency(
                        EventFrequency(
                            "event_\(index)", comparison, count, in: .days(1), where: .property("v", .greaterThan(4)))),
                    historyProperties: ["event_\(index)": ["v"]])
            }
        }
        let triggered = Locked(0)
        let registration = engine.surveys.onTrigger { _ in triggered.withLock { $0 += 1 } }
        defer { registration.cancel() }
        let events = quick ? 20_000 : 100_000
        func cost() async throws -> Double {
            let start = now()
            for index in 0..<events {
                try engine.recordRetrying("event_\(index % 200)", parameters: ["i": 1, "v": .int(index % 10)])
            }
            try await engine.settle()
            return Double(now() - start) / Double(events) / 1_000
        }
        // Only keeping the values: surveys no event is a candidate for.
        let keeping = (0..<100).map { index in
            Survey(id: "keeping_\(index)", triggerEventNames: ["never"], historyProperties: ["event_\(index)": ["v"]])
        }
        let setups: [(label: String, rules: [Survey], target: Double?, rounds: Int)] = [
            ("that hold once", surveys(.exactly, 3), 2, quick ? 3 : 7),
            ("that hold at nearly every event", surveys(.atLeast, 2), nil, 3),
            ("never evaluated (values kept only)", keeping, nil, 3),
        ]
        for (label, rules, target, rounds) in setups {
            triggered.withLock { $0 = 0 }
            let comparison = try await Comparison.measure(
                rounds: rounds,
                spool: {
                    for survey in rules { try engine.surveys.register(survey) }
                    defer { for survey in rules { engine.surveys.unregister(survey.id) } }
                    return try await cost()
                },
                baseline: cost)
            let (spool, plain) = (Samples(values: comparison.spool), Samples(values: comparison.baseline))
            let ratios = Samples(values: comparison.ratios)
            let interval = ratios.medianInterval
            let name = "record until delivered, 100 surveys with filtered rules \(label)"
            report.add(
                Row(
                    area: "history", name: "\(name), added per event", value: spool.median - plain.median, unit: "µs",
                    detail:
                        "\(formatNumber(spool.median)) µs per event with them, \(formatNumber(plain.median)) µs with none; \(triggered.withLock { $0 }) triggers for \(rounds) × \(events) events over 200 names, 100 of them keeping a value"
                ))
            report.add(
                Row(
                    area: "history", name: "\(name) / plain record", value: ratios.median, unit: "×",
                    detail:
                        "median of \(comparison.ratios.count) per-round ratios, interval \(formatNumber(interval.low))–\(formatNumber(interval.high))",
                    target: target, comparison: target == nil ? nil : .atMost, low: interval.low, high: interval.high,
                    rounds: comparison.ratios.count, othersShare: comparison.othersShare))
        }
    }
}
