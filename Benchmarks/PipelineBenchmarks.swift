import Foundation
import Spool

/// What identity and middleware cost the record path: `record` until durable
/// with a user identified and two middlewares (one adding a parameter, one
/// dropping one event in ten), against plain `record` in the same run.
struct PipelineBenchmarks {
    let quick: Bool
    let report: Report

    /// Records `count` events and waits until they are durable; calls per
    /// second (dropped calls included: they are the caller's work too), and
    /// the caller's mean time per call in µs.
    func recordUntilDurable(count: Int, pipeline: Bool) async throws -> (rate: Double, caller: Double) {
        let scratch = Scratch(pipeline ? "pipeline" : "plain")
        let engine = EventEngine(configuration: .unbounded(scratch.database))
        try await engine.start()
        if pipeline {
            try engine.identify(userId: "user-42", traits: ["plan": "pro"])
            try engine.setContext(EventContext(app: ["version": "2.1"], locale: "fr-FR"))
            engine.addMiddleware { event in
                event.parameters["app_version"] = "2.1"
                return .keep
            }
            let counter = Counter()
            engine.addMiddleware { _ in counter.next() % 10 == 0 ? .drop(reason: "sampled out") : .keep }
        }
        let start = now()
        for _ in 0..<count { try engine.recordRetrying("purchase", parameters: ListenerBenchmarks.parameters) }
        let recorded = now()
        try await engine.settle()
        let rate = Double(count) / seconds(since: start)
        await engine.close()
        return (rate, Double(recorded - start) / Double(count) / 1_000)
    }

    func run() async throws {
        let count = quick ? 100_000 : 300_000
        var callers: (pipeline: [Double], plain: [Double]) = ([], [])
        let comparison = try await Comparison.measure(rounds: quick ? 3 : 5, target: 0.85) {
            let result = try await recordUntilDurable(count: count, pipeline: true)
            callers.pipeline.append(result.caller)
            return result.rate
        } baseline: {
            let result = try await recordUntilDurable(count: count, pipeline: false)
            callers.plain.append(result.caller)
            return result.rate
        }
        report.add(
            comparison, area: "listen", unit: "events/s",
            spool: "record until durable, identified, context, 2 middlewares (add a parameter, drop 10%)",
            spoolDetail: "\(count) calls, 10 parameters", baseline: "plain record until durable",
            ratio: "ratio with identity and pipeline / plain", target: 0.85)
        report.add(
            Row(
                area: "listen", name: "caller's time per record with identity and 2 middlewares, mean over the loop",
                value: Samples(values: callers.pipeline).median, unit: "µs",
                detail: "plain record in the same run: \(formatNumber(Samples(values: callers.plain).median)) µs"))
    }
}

/// A counter the sampling middleware shares across calls.
private final class Counter: @unchecked Sendable {
    // Safe: the benchmark records from one thread.
    private var value = 0
    func next() -> Int {
        value += 1
        return value
    }
}
