import CSQLite
import Foundation
import Spool
import SpoolStorage

/// Upload drain: Spool's uploader (batch read, body build by concatenation,
/// position advance, prefix delete) with the transport stubbed in-process,
/// beside a raw-SQLite drain; each batch format (UploadFormatBenchmarks); end
/// to end to the loopback collector, and the tail an app waits after its last
/// `record` (TailBenchmarks).
struct DrainBenchmarks {
    let quick: Bool
    let report: Report

    /// Answers every batch at once with `status` (no network), which a run
    /// may change: refuse while the log fills, then accept.
    final class StubDispatcher: EventDispatcher {
        let status: Locked<Int>
        /// The batch size and log bound its engine is configured with.
        let batchSize: Int
        let retainedEvents: Int
        init(status: Int, batchSize: Int, retainedEvents: Int) {
            self.status = Locked(status)
            self.batchSize = batchSize
            self.retainedEvents = retainedEvents
        }
        func dispatchEvent(event: EventForDispatch, completionHandler: DispatchCompletionHandler?) {
            completionHandler?(.response(status: status.withLock { $0 }, retryAfter: nil, message: nil))
        }
        func flushEvents() {}
    }

    /// An engine on `database` uploading `count` events (and room for as
    /// many more) to the loopback collector at `collector`, 100 per batch,
    /// `concurrentRequests` in flight.
    static func loopbackEngine(on database: URL, count: Int, collector: URL, concurrentRequests: Int = 1)
        -> EventEngine
    {
        var configuration = EngineConfiguration(
            database: .file(database), maximumRetainedEvents: count * 2, collectorURL: collector,
            batchSize: 100, uploadInterval: 60, dispatcher: DefaultEventDispatcher())
        configuration.maximumConcurrentRequests = concurrentRequests
        return EventEngine(configuration: configuration)
    }

    /// An engine on the file `database` that uploads through `dispatcher`
    /// only (the collector URL is never reached) in batches of `batchSize`,
    /// with no timed uploads, waits an hour after a refusal, so a refused
    /// upload parks the uploader until a flush, and has no byte bound.
    static func stubbedConfiguration(
        database: URL, dispatcher: any EventDispatcher, batchSize: Int = 100,
        maximumRetainedEvents: Int? = EngineConfiguration().maximumRetainedEvents
    ) -> EngineConfiguration {
        var configuration = EngineConfiguration(
            database: .file(database), maximumRetainedEvents: maximumRetainedEvents,
            collectorURL: URL(string: "http://127.0.0.1:9/stub")!, batchSize: batchSize, uploadInterval: 3_600,
            dispatcher: dispatcher, retryPolicy: RetryPolicy(initialDelay: 3_600))
        // The byte bound (50 MB by default) would drop the oldest of a 1M
        // backlog; these benchmarks measure the backlog.
        configuration.maximumQueueBytes = nil
        return configuration
    }

    func run() async throws {
        try await drain()
        try await endToEnd()
        try await tail()
        try await tail(concurrentRequests: 2)
        try await roundTrips()
    }

    /// The drain beside raw SQLite: through a custom dispatcher, then through
    /// each batch format (`--only drain` runs just these).
    func drain() async throws {
        try await dispatcherDrain()
        try await UploadFormatBenchmarks(quick: quick, report: report).run()
    }

    func dispatcherDrain() async throws {
        let count = quick ? 50_000 : 200_000
        let backlog = try await fill(count: count)  // recorded once; each round drains a copy
        let comparison = try await Comparison.measure(rounds: quick ? 3 : 5, target: 0.7) {
            try await spoolDrain(backlog, count: count)
        } baseline: {
            rawDrain(count: count)
        }
        report.add(
            comparison, area: "upload", unit: "events/s", spool: "Spool drain, 100/batch, custom dispatcher stubbed",
            spoolDetail: "read + body build + advance + delete, \(count) events",
            baseline: "raw SQLite drain: select 100 oldest + delete",
            ratio: "ratio Spool drain through a custom dispatcher / raw drain",
            target: 0.7)
    }

    /// An engine on `database` uploading through `stub` only.
    static func stubbedEngine(on database: URL, _ stub: StubDispatcher) -> EventEngine {
        EventEngine(
            configuration: stubbedConfiguration(
                database: database, dispatcher: stub, batchSize: stub.batchSize,
                maximumRetainedEvents: stub.retainedEvents))
    }

    /// A file holding `count` events, recorded while the stub refuses them,
    /// its engine closed.
    func fill(count: Int) async throws -> Scratch {
        let scratch = Scratch("drain-backlog")
        let engine = Self.stubbedEngine(
            on: scratch.database, StubDispatcher(status: 500, batchSize: 100, retainedEvents: 10_000_000))
        try await engine.start()
        for _ in 0..<count {
            try engine.recordRetrying(AppendBenchmarks.name, parameters: ListenerBenchmarks.parameters)
        }
        try await engine.settle()
        await engine.close()
        return scratch
    }

    /// Events per second through the stubbed dispatcher, draining a copy of
    /// `backlog` (a new one from `fill(count:)` when nil); `beforeDrain`
    /// runs once the engine is open on it.
    func spoolDrain(_ backlog: Scratch? = nil, count: Int, beforeDrain: () -> Void = {}) async throws -> Double {
        let filled: Scratch
        if let backlog { filled = backlog } else { filled = try await fill(count: count) }
        let scratch = try Scratch(copying: filled, "drain")
        let stub = StubDispatcher(status: 500, batchSize: 100, retainedEvents: 10_000_000)
        let engine = Self.stubbedEngine(on: scratch.database, stub)
        // Opened while the stub refuses: the first refusal parks the uploader in backoff.
        try await engine.start()
        let pending = try await engine.uploadStatistics().pending
        precondition(pending >= count, "the copy holds \(pending) of \(count) events")
        return try await Self.timeDrain(engine, of: pending, in: scratch.database) {
            beforeDrain()
            stub.status.withLock { $0 = 200 }
        }
    }

    /// Once `engine` has committed all `count` events (its stub refusing
    /// them), lets the stub accept (`accept`) and times one flush of
    /// everything: events per second. Closes the engine.
    static func timeDrain(
        _ engine: EventEngine, of count: Int, in database: URL, accept: () -> Void
    ) async throws -> Double {
        try await engine.settle()
        checkpointAndTruncateWAL(database)  // as the baseline: start from an empty WAL
        accept()
        let start = now()
        try await engine.flush()
        let rate = Double(count) / seconds(since: start)
        let left = try await engine.uploadStatistics().pending
        precondition(left == 0, "drain left \(left) events")
        await engine.close()
        return rate
    }

    func rawDrain(count: Int) -> Double {
        let scratch = Scratch("rawdrain")
        let raw = RawSQLite(path: scratch.database.path)
        raw.createPlainEventsTable()
        raw.insertEvents(
            count: count, perTransaction: 1_000, id: "0190f3a2-7c1e-7b44-9a55-6f1d2e3c4b5a",
            name: AppendBenchmarks.name,
            parameters: ListenerBenchmarks.encodedParameters, session: AppendBenchmarks.session)
        raw.exec("PRAGMA wal_checkpoint(TRUNCATE)")
        let start = now()
        let drained = Self.rawDrainLoop(raw)
        precondition(drained == count)
        return Double(count) / seconds(since: start)
    }

    /// Drains the raw table 100 oldest rows per transaction (select, read
    /// the text columns, delete), calling `afterBatch` with the running count
    /// after each; returns how many it drained.
    @discardableResult
    static func rawDrainLoop(_ raw: RawSQLite, afterBatch: (Int) -> Void = { _ in }) -> Int {
        let select = raw.prepare(
            "SELECT seq, id, name, parameters, recorded_at, session_id FROM events ORDER BY seq LIMIT 100")
        let delete = raw.prepare("DELETE FROM events WHERE seq <= ?")
        defer {
            sqlite3_finalize(select)
            sqlite3_finalize(delete)
        }
        var drained = 0
        while true {
            raw.exec("BEGIN IMMEDIATE")
            var last: Int64 = 0
            var rows = 0
            var bytes = 0
            while sqlite3_step(select) == SQLITE_ROW {
                last = sqlite3_column_int64(select, 0)
                for column in 1...3 {
                    let text = String(cString: sqlite3_column_text(select, Int32(column)))
                    bytes += text.utf8.count
                }
                rows += 1
            }
            sqlite3_reset(select)
            blackHole(bytes)
            if rows == 0 {
                raw.exec("COMMIT")
                return drained
            }
            sqlite3_bind_int64(delete, 1, last)
            precondition(sqlite3_step(delete) == SQLITE_DONE)
            sqlite3_reset(delete)
            raw.exec("COMMIT")
            drained += rows
            afterBatch(drained)
        }
    }

    // MARK: - end to end

    func endToEnd() async throws {
        guard let collector = LoopbackCollector(purpose: "the end-to-end upload") else { return }
        defer { collector.stop() }
        let scratch = Scratch("e2e")
        let log = collector.log
        let count = quick ? 20_000 : 100_000
        let engine = Self.loopbackEngine(on: scratch.database, count: count, collector: collector.url)
        try await engine.start()
        let start = now()
        for _ in 0..<count {
            try engine.recordRetrying(AppendBenchmarks.name, parameters: ListenerBenchmarks.parameters)
        }
        try await engine.flush()
        let elapsed = seconds(since: start)
        let statistics = try await engine.uploadStatistics()
        await engine.close()
        let bytes =
            (try? String(contentsOf: log, encoding: .utf8))?.split(separator: "\n").reduce(0) { total, line in
                total
                    + ((try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["bytes"] as? Int
                        ?? 0)
            } ?? 0
        report.add(
            Row(
                area: "upload", name: "end to end to the loopback collector (Python)",
                value: Double(statistics.uploaded) / elapsed,
                unit: "events/s", detail: "\(statistics.uploaded) events in \(statistics.requests) requests of 100"))
        report.add(
            Row(
                area: "upload", name: "end to end, request bytes", value: Double(bytes) / elapsed / 1_048_576,
                unit: "MB/s",
                detail: "the single-threaded Python collector is the likely bound"))
    }
}
