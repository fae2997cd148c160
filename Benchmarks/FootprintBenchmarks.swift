import CSQLite
import Foundation
import Spool
import SpoolStorage

/// The file's footprint and the engine's start at a large backlog, each
/// step in a fresh process on one database file: start time with 1M events
/// pending, erase time at 1M rows, and the file size after draining 1M.
struct FootprintBenchmarks {
    let quick: Bool
    let report: Report

    /// An engine whose uploads are answered with `status` at once (no network).
    static func engine(_ database: URL, status: Int) -> EventEngine {
        let stub = DrainBenchmarks.StubDispatcher(status: status, batchSize: 1_000, retainedEvents: 5_000_000)
        return DrainBenchmarks.stubbedEngine(on: database, stub)
    }

    var count: Int { quick ? 200_000 : 1_000_000 }
    var label: String { quick ? "200k" : "1M" }

    /// Returns a copy of the backlog it built, as it was before the erase
    /// and the drain: the open-check measures its start.
    func run() throws -> Scratch {
        let scratch = Scratch("footprint")
        let database = scratch.database.path
        let copy = scratch.url.appendingPathComponent("copy.sqlite").path
        _ = try report.runIsolatedValues("footprint-build", ["--database", database, "--count", "\(count)"])
        let pristine = try Scratch(copying: scratch, "open-check")
        var starts: [Double] = []
        for _ in 0..<3 {
            starts.append(try report.runIsolatedValues("footprint-start", ["--database", database])["start"] ?? .nan)
        }
        report.add(
            Row(
                area: "footprint", name: "start() in a fresh process, \(label) events pending",
                value: Samples(values: starts).median, unit: "ms",
                detail:
                    "median of 3 fresh processes (runs: \(starts.map { formatNumber($0) }.joined(separator: ", ")))",
                target: 50, comparison: .atMost))
        for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: database + suffix) {
            try? FileManager.default.removeItem(atPath: copy + suffix)  // try?: nothing there the first time
            try FileManager.default.copyItem(atPath: database + suffix, toPath: copy + suffix)
        }
        let erase = try report.runIsolatedValues("footprint-erase", ["--database", copy])
        report.add(
            Row(
                area: "footprint", name: "eraseAllData() at \(label) rows", value: erase["erase"] ?? .nan, unit: "ms",
                detail:
                    "\(formatNumber((erase["before"] ?? 0) / 1_048_576)) MB file → \(formatNumber((erase["after"] ?? 0) / 1_024)) KB",
                target: 2_000, comparison: .atMost))
        let drain = try report.runIsolatedValues("footprint-drain", ["--database", database])
        let history = drain["history"] ?? 0
        report.add(
            Row(
                area: "footprint", name: "file + WAL after draining \(label), beyond the history",
                value: ((drain["after"] ?? .nan) - history) / 1_048_576, unit: "MB",
                detail:
                    "\(formatNumber((drain["before"] ?? 0) / 1_048_576)) MB before the drain; history \(formatNumber(history / 1_048_576)) MB; small again \(formatNumber(drain["seconds"] ?? .nan)) s after the last upload",
                target: 4, comparison: .atMost, exact: true))
        report.add(
            Row(
                area: "footprint", name: "record() p99 while the file shrinks / before the drain",
                value: (drain["p99During"] ?? .nan) / (drain["p99Before"] ?? .nan), unit: "×",
                detail:
                    "\(formatNumber(drain["p99During"] ?? .nan)) µs vs \(formatNumber(drain["p99Before"] ?? .nan)) µs, at 5,000 calls/s",
                target: 1.5, comparison: .atMost))
        return pristine
    }

    // MARK: - Phases (each in a fresh process)

    static func build(_ database: URL, count: Int) async throws {
        let engine = engine(database, status: 503)
        try await engine.start()
        for index in 0..<count {
            try engine.recordRetrying("purchase", parameters: ListenerBenchmarks.parameters)
            if index % 100_000 == 99_999 { try await engine.settle() }
        }
        try await engine.settle()
        await engine.close()
    }

    static func start(_ database: URL) async throws {
        let engine = engine(database, status: 503)
        let started = now()
        try await engine.start()
        emitValue("start", Double(now() - started) / 1e6)
        await engine.close()
    }

    static func erase(_ database: URL) async throws {
        let engine = engine(database, status: 503)
        try await engine.start()
        emitValue("before", Double(fileSize(database)))
        let started = now()
        try await engine.eraseAllData()
        emitValue("erase", Double(now() - started) / 1e6)
        emitValue("after", Double(fileSize(database)))
        await engine.close()
    }

    static func drain(_ database: URL) async throws {
        let engine = engine(database, status: 200)
        try await engine.start()
        // record() timed at a steady 5,000 calls a second, before the drain
        // and then while the file gives its space back.
        func probe(_ calls: Int, until done: () -> Bool = { false }) async throws -> Histogram {
            var timings = Histogram()
            for index in 0..<calls {
                timings.add(timed { _ = try? engine.record("probe") })  // try?: timing only
                if index % 100 == 99 {
                    try await Task.sleep(nanoseconds: 20_000_000)
                    if done() { break }
                }
            }
            return timings
        }
        emitValue("p99Before", try await probe(5_000).percentile(0.99))
        emitValue("before", Double(fileSize(database)))
        try await engine.flush()
        let drained = now()
        guard let queue = engine.databaseQueue else { return }
        let history = try await queue.run { connection -> Int in
            // The history's share of the file: its rows and its index, by page.
            try connection.scalarInt(
                "SELECT sum(pgsize) FROM dbstat WHERE name IN ('event_history', 'event_history_by_name_time')")
        }
        emitValue("history", Double(history))
        let limit = 4 << 20 + history
        let during = try await probe(300_000) { fileSize(database) <= limit || seconds(since: drained) > 60 }
        emitValue("seconds", seconds(since: drained))
        emitValue("p99During", during.percentile(0.99))
        emitValue("after", Double(fileSize(database)))
        await engine.close()
    }

    /// The database file plus its WAL, in bytes.
    static func fileSize(_ database: URL) -> Int {
        spool_bench.fileSize(database.path) + spool_bench.fileSize(database.path + "-wal")
    }

    static func timed(_ body: () -> Void) -> UInt64 {
        let start = now()
        body()
        return now() - start
    }
}
