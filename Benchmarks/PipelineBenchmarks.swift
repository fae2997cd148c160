import Foundation
import Spool

/// What identity and middleware cost the record path: `record` until durable
/// with a user identified and two middlewares (one adding a parameter, one
/// dropping one event in ten), against plain `record` in the same run.
struct PipelineBenchmarks {
    let quick: Bool
    let report: Report

    /// Records `count` events and waits until they are durable; calls per
    /// second (dropped calls included: they are the caller's work too).
    func recordUntilDurable(count: Int, pipeline: Bool) async throws -> Double {
        let scratch = Scratch(pipeline ? "pipeline" : "plain")
        let engine = EventEngine(configuration: .unbounded(scratch.database))
        try await engine.start()
        if pipeline { try Self.addPipeline(to: engine) }
        let start = now()
        for _ in 0..<count { try engine.recordRetrying("purchase", parameters: ListenerBenchmarks.parameters) }
        try await engine.settle()
        let rate = Double(count) / seconds(since: start)
        await engine.close()
        return rate
    }

    /// The caller's side of `record` alone, in µs per call: middleware,
    /// validation, encoding, the stamps and the gates, on an engine whose
    /// consent gate then drops the event (nothing waits for the writer).
    func callerCost(count: Int, pipeline: Bool) async throws -> Double {
        let engine = EventEngine(configuration: EngineConfiguration(consent: false))
        try await engine.start()
        if pipeline { try Self.addPipeline(to: engine) }
        let start = now()
        for _ in 0..<count { try engine.record("purchase", parameters: ListenerBenchmarks.parameters) }
        let cost = Double(now() - start) / Double(count) / 1_000
        await engine.close()
        return cost
    }

    /// `identify` in µs per call, on a file: as it is (its row written on the
    /// database queue after the call), and followed by `identity()`, which
    /// returns once the row is written (what writing it within the call
    /// would cost the caller).
    func identifyCost(count: Int) async throws -> (returning: Double, written: Double) {
        let scratch = Scratch("identify")
        let engine = EventEngine(configuration: .unbounded(scratch.database))
        try await engine.start()
        var start = now()
        for index in 0..<count { try engine.identify(userId: "user-\(index)", traits: ["plan": "pro"]) }
        let returning = Double(now() - start) / Double(count) / 1_000
        try await engine.settle()
        start = now()
        for index in 0..<count {
            try engine.identify(userId: "user-\(index)", traits: ["plan": "pro"])
            _ = try await engine.identity()
        }
        let written = Double(now() - start) / Double(count) / 1_000
        await engine.close()
        return (returning, written)
    }

    /// A user identified, a context, and two middlewares: one adds a
    /// parameter, one drops every tenth event.
    static func addPipeline(to engine: EventEngine) throws {
        try engine.identify(userId: "user-42", traits: ["plan": "pro"])
        try engine.setContext(EventContext(app: ["version": "2.1"], locale: "fr-FR"))
        engine.addMiddleware { event in
            event.parameters["app_version"] = "2.1"
            return .keep
        }
        let counter = Counter()
        engine.addMiddleware { _ in counter.next() % 10 == 0 ? .drop(reason: "sampled out") : .keep }
    }

    func run() async throws {
        let count = quick ? 50_000 : 300_000
        let comparison = try await Comparison.measure(rounds: quick ? 3 : 5, target: 0.85) {
            try await recordUntilDurable(count: count, pipeline: true)
        } baseline: {
            try await recordUntilDurable(count: count, pipeline: false)
        }
        report.add(
            comparison, area: "listen", unit: "events/s",
            spool: "record until durable, identified, context, 2 middlewares (add a parameter, drop 10%)",
            spoolDetail: "\(count) calls, 10 parameters", baseline: "plain record until durable",
            ratio: "ratio with identity and pipeline / plain", target: 0.85)
        var callers: (pipeline: [Double], plain: [Double]) = ([], [])
        for _ in 0..<(quick ? 3 : 5) {
            callers.pipeline.append(try await callerCost(count: count, pipeline: true))
            callers.plain.append(try await callerCost(count: count, pipeline: false))
        }
        report.add(
            Row(
                area: "listen", name: "caller's cost per record with identity and 2 middlewares",
                value: Samples(values: callers.pipeline).median, unit: "µs",
                detail: "without middleware in the same run: \(formatNumber(Samples(values: callers.plain).median)) µs;"
                    + " median of \(callers.plain.count) loops of \(count), the writer not waited for"))
        var identifies: (returning: [Double], written: [Double]) = ([], [])
        for _ in 0..<(quick ? 3 : 5) {
            let cost = try await identifyCost(count: quick ? 500 : 2_000)
            identifies.returning.append(cost.returning)
            identifies.written.append(cost.written)
        }
        report.add(
            Row(
                area: "listen", name: "identify(): the caller's cost, its row written after the call",
                value: Samples(values: identifies.returning).median, unit: "µs",
                detail: "waiting until the row is written (identify, then identity()): "
                    + "\(formatNumber(Samples(values: identifies.written).median)) µs;"
                    + " median of \(identifies.returning.count) loops"))
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
