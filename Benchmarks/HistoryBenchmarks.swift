import Foundation
import Spool
import SpoolStorage

/// EVENT_FREQUENCY over a 1M-row history, and trigger matching with 100
/// registered surveys.
struct HistoryBenchmarks {
    let quick: Bool
    let report: Report

    func run() async throws {
        let scratch = Scratch("history")
        let engine = EventEngine(
            configuration: EngineConfiguration(database: .file(scratch.database), maximumRetainedEvents: 1_000))
        try await engine.start()
        // 1M history rows over 100 event names, through the real record path.
        let rows = 1_000_000
        let names = (0..<100).map { "event_\($0)" }
        for index in 0..<rows {
            try engine.record(names[index % names.count], parameters: ["i": .int(index)])
            if index % 50_000 == 49_999 { try await engine.settle() }
        }
        try await engine.settle()
        checkpointAndTruncateWAL(scratch.database)

        let cases: [(String, SurveyCondition)] = [
            ("at least 3 in the last 30 days", .eventFrequency(EventFrequency("event_7", .atLeast, 3, in: .days(30)))),
            ("at most 5, ever", .eventFrequency(EventFrequency("event_7", .atMost, 5))),
            ("exactly 10000, ever (counts every row)", .eventFrequency(EventFrequency("event_7", .exactly, 10_000))),
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
                values: try await measureEvaluation(condition, times: quick ? 2_000 : 10_000, in: engine)
                    .map {
                        Double($0) / 1_000
                    })
            report.add(
                Row(
                    area: "history", name: "EVENT_FREQUENCY over 1M rows: \(label)", value: samples.median, unit: "µs",
                    detail: "p99 \(formatNumber(samples.percentile(0.99))) µs",
                    target: index == 0 ? 100 : nil, comparison: index == 0 ? .atMost : nil))
        }
        // Through the public async API (one hop to the database queue and back).
        var api: [Double] = []
        let condition = cases[0].1
        for _ in 0..<(quick ? 500 : 2_000) {
            let start = now()
            blackHole(try await engine.surveys.evaluate(condition))
            api.append(Double(now() - start) / 1_000)
        }
        report.add(
            Row(
                area: "history", name: "surveys.evaluate(…) round trip, same rule", value: Samples(values: api).median,
                unit: "µs", detail: "includes the hop to the database queue"))

        // Trigger matching: 100 surveys (90 on named triggers, 10 wildcard),
        // events over 200 names; then with 10 of them carrying a frequency
        // rule (one of those a wildcard, so evaluated on every event).
        let events = quick ? 50_000 : 200_000
        let baseline = try await deliveryCost(engine, events: events)
        let triggered = Locked(0)
        let registration = engine.surveys.onTrigger { _ in triggered.withLock { $0 += 1 } }
        for withRules in [false, true] {
            for index in 0..<100 {
                let rule = withRules && index % 10 == 3
                try engine.surveys.register(
                    Survey(
                        id: "survey_\(index)", triggerEventNames: index < 90 ? ["event_\(index)"] : nil,
                        conditions: rule
                            ? .eventFrequency(EventFrequency("event_\(index)", .atLeast, 2, in: .days(1))) : .always))
            }
            triggered.withLock { $0 = 0 }
            let cost = try await deliveryCost(engine, events: events)
            report.add(
                Row(
                    area: "history",
                    name: withRules
                        ? "trigger matching per event, 100 surveys, 10 rules"
                        : "trigger matching per event, 100 surveys",
                    value: cost - baseline, unit: "µs",
                    detail:
                        "\(triggered.withLock { $0 }) triggers for \(events) events; delivery alone \(formatNumber(baseline)) µs"
                ))
        }
        registration.cancel()
        await engine.close()
    }

    /// Per-event cost of pushing `events` synthetic events (200 names) through delivery.
    func deliveryCost(_ engine: EventEngine, events: Int) async throws -> Double {
        let start = now()
        let perName = events / 200
        for index in 0..<200 {
            await engine.deliverSyntheticEvents(perName, name: "event_\(index)", json: #"{"i":1}"#, groupSize: 512)
        }
        return Double(now() - start) / Double(perName * 200) / 1_000
    }
}
