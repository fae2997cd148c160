import Foundation
import Spool
import SpoolStorage

/// What the queue's byte and age bounds cost the record path: the same
/// append-until-durable with and without them (the count bound in both),
/// measured alternately.
struct QueueBoundsBenchmarks {
    let quick: Bool
    let report: Report

    /// Appends `count` events under `bounds` and waits until the last is
    /// durable; events/s.
    func appendUntilDurable(count: Int, bounds: QueueBounds) async throws -> Double {
        let scratch = Scratch("bounds")
        let log = EventLog(database: try DatabaseQueue(path: scratch.database.path, options: ConnectionOptions()))
        log.setQueueBounds(bounds)
        let start = now()
        for _ in 0..<count { try log.appendRetrying(AppendBenchmarks.record()) }
        try await log.waitUntilAllDurable()
        let rate = Double(count) / seconds(since: start)
        log.database.close()
        return rate
    }

    func run() async throws {
        let count = quick ? 100_000 : 300_000
        // Every bound in force, each close to the log's size so that each
        // commit checks it (and the count bound drops).
        let withBounds = QueueBounds(count: 50_000, bytes: 50_000_000, age: 30 * 86_400)
        let countOnly = QueueBounds(count: 50_000)
        let comparison = try await Comparison.measure(rounds: quick ? 3 : 5, target: 0.95) {
            try await appendUntilDurable(count: count, bounds: withBounds)
        } baseline: {
            try await appendUntilDurable(count: count, bounds: countOnly)
        }
        report.add(
            comparison, area: "append", unit: "events/s", spool: "append until durable, count + byte + age bounds",
            spoolDetail: "\(count) events, bounds 50,000 events, 50 MB, 30 days",
            baseline: "append until durable, count bound only", ratio: "ratio with byte and age bounds / without",
            target: 0.95)
    }
}
