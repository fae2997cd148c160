import Foundation
import Spool
import SpoolStorage

/// Throughput against backlog size, for the SVG report: the log filled
/// chunk by chunk to 1M (100k with `--quick`) by `append`, by `record` and by
/// a raw SQLite insert, each chunk timed until durable; then Spool's drain
/// (100 per batch, transport stubbed) and the raw drain of that backlog,
/// timed per 10,000 events. Each point is the median of five neighbouring
/// chunks.
struct BacklogCurves {
    let quick: Bool
    let report: Report

    static let chunk = 10_000
    var total: Int { quick ? 100_000 : 1_000_000 }
    var label: String { quick ? "100k" : "1M" }

    /// A dispatcher that refuses until told, then accepts every batch at once
    /// and notes when it did.
    final class TimingDispatcher: EventDispatcher {
        let accepting = Locked(false)
        let times = Locked<[UInt64]>([])
        func dispatchEvent(event: EventForDispatch, completionHandler: DispatchCompletionHandler?) {
            let accepting = self.accepting.withLock { $0 }
            if accepting { times.withLock { $0.append(now()) } }
            completionHandler?(.response(status: accepting ? 200 : 500, retryAfter: nil, message: nil))
        }
        func flushEvents() {}
    }

    func run() async throws {
        let append = try await appendCurve()
        let (record, drain) = try await recordAndDrainCurves()
        let (rawInsert, rawDrain) = rawCurves()
        let all: [(String, String, [[Double]])] = [
            ("append", "Spool append until durable", append), ("record", "record(10 parameters) until durable", record),
            ("raw-insert", "raw SQLite insert (baseline)", rawInsert),
            ("drain", "Spool drain, 100/batch, transport stubbed", drain),
            ("raw-drain", "raw SQLite drain (baseline)", rawDrain),
        ]
        for (id, name, points) in all {
            report.add(
                Series(id: "curves/\(id)", name: name, xUnit: "events in the log", yUnit: "events/s", points: points))
        }
        func at(_ points: [[Double]], _ backlog: Double) -> Double {
            points.min { abs($0[0] - backlog) < abs($1[0] - backlog) }?[1] ?? .nan
        }
        let low = Double(Self.chunk * 3)
        let high = Double(total - Self.chunk * 3)
        for (id, name, points) in all {
            report.add(
                Row(
                    area: "curves", name: "\(id): events/s near a \(label) backlog / near a 30k backlog",
                    value: at(points, high) / at(points, low), unit: "×",
                    detail:
                        "\(formatNumber(at(points, high))) vs \(formatNumber(at(points, low))) events/s; \(name), medians of 5 chunks of \(Self.chunk)"
                ))
        }
        report.add(
            Row(
                area: "curves", name: "record / raw insert near a \(label) backlog",
                value: at(record, high) / at(rawInsert, high), unit: "×",
                detail: "one fill each, for the plot; the judged ratio is the record area's"))
    }

    /// Events per second of each chunk (keyed by the backlog after it),
    /// smoothed with the median of five neighbours.
    static func smoothed(_ points: [(Int, Double)]) -> [[Double]] {
        points.indices.map { index in
            let window = points[max(0, index - 2)...min(points.count - 1, index + 2)].map(\.1)
            return [Double(points[index].0), Samples(values: window).median]
        }
    }

    func appendCurve() async throws -> [[Double]] {
        let scratch = Scratch("curve-append")
        let log = EventLog(database: try DatabaseQueue(path: scratch.database.path))
        var points: [(Int, Double)] = []
        for filled in stride(from: Self.chunk, through: total, by: Self.chunk) {
            let start = now()
            for _ in 0..<Self.chunk { try log.appendRetrying(AppendBenchmarks.record()) }
            try await log.waitUntilAllDurable()
            points.append((filled, Double(Self.chunk) / seconds(since: start)))
        }
        await log.close()
        log.database.close()
        return Self.smoothed(points)
    }

    func recordAndDrainCurves() async throws -> (record: [[Double]], drain: [[Double]]) {
        let scratch = Scratch("curve-record")
        let dispatcher = TimingDispatcher()
        let engine = EventEngine(
            configuration: DrainBenchmarks.stubbedConfiguration(
                database: scratch.database, dispatcher: dispatcher, maximumRetainedEvents: 10_000_000))
        try await engine.start()
        var record: [(Int, Double)] = []
        for filled in stride(from: Self.chunk, through: total, by: Self.chunk) {
            let start = now()
            for _ in 0..<Self.chunk {
                try engine.recordRetrying(AppendBenchmarks.name, parameters: ListenerBenchmarks.parameters)
            }
            try await engine.settle()
            record.append((filled, Double(Self.chunk) / seconds(since: start)))
        }
        checkpointAndTruncateWAL(scratch.database)
        dispatcher.accepting.withLock { $0 = true }
        let drainStart = now()
        try await engine.flush()
        await engine.close()
        // Batch i (of 100 events) was answered at times[i]; per 10,000 events,
        // keyed by the backlog left before them.
        let times = [drainStart] + dispatcher.times.withLock { $0 }
        let perChunk = Self.chunk / engine.configuration.batchSize
        var drain: [(Int, Double)] = []
        for end in stride(from: perChunk, to: times.count, by: perChunk) {
            let backlog = total - (end - perChunk) * engine.configuration.batchSize
            drain.append((backlog, Double(Self.chunk) / (Double(times[end] - times[end - perChunk]) / 1e9)))
        }
        return (Self.smoothed(record), Self.smoothed(drain.reversed()))
    }

    func rawCurves() -> (insert: [[Double]], drain: [[Double]]) {
        let scratch = Scratch("curve-raw")
        let raw = RawSQLite(path: scratch.database.path)
        raw.createPlainEventsTable()
        var insert: [(Int, Double)] = []
        for filled in stride(from: Self.chunk, through: total, by: Self.chunk) {
            let start = now()
            raw.insertEvents(
                count: Self.chunk, perTransaction: 1_000, id: "0190f3a2-7c1e-7b44-9a55-6f1d2e3c4b5a",
                name: AppendBenchmarks.name, parameters: ListenerBenchmarks.encodedParameters,
                session: AppendBenchmarks.session)
            insert.append((filled, Double(Self.chunk) / seconds(since: start)))
        }
        raw.exec("PRAGMA wal_checkpoint(TRUNCATE)")
        var drain: [(Int, Double)] = []
        var chunkStart = now()
        DrainBenchmarks.rawDrainLoop(raw) { drained in
            guard drained % Self.chunk == 0 else { return }
            drain.append((total - drained + Self.chunk, Double(Self.chunk) / seconds(since: chunkStart)))
            chunkStart = now()
        }
        return (Self.smoothed(insert), Self.smoothed(drain.reversed()))
    }
}
