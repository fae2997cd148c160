import CSQLite
import Foundation
import Spool
import SpoolStorage

/// What an unthrottled burst of `record` costs in memory and in caller
/// stalls, each measured in a fresh process (`--phase burst-…`), what one
/// buffered event holds (`--phase buffered-bytes`), and the caller's side
/// alone in its fastest runs (`--phase caller`), the target for the
/// caller's cost: a burst's median call moves with the machine and the
/// writer's thread beside it, and is reported with the machine's
/// calibration beside it.
struct RecordBurstBenchmarks {
    let quick: Bool
    let report: Report

    func run() throws {
        try report.runIsolated("burst-100k", quick: quick)
        try report.runIsolated(quick ? "burst-300k" : "burst-1m", quick: quick)
        try report.runIsolated("buffered-bytes", quick: quick)
        try report.runIsolated("caller", quick: quick)
    }

    /// Records `count` events (10 parameters) as fast as one thread can, each
    /// call timed, then waits until all are committed and counts them.
    func burst(_ count: Int) async throws {
        let scratch = Scratch("burst")
        // How busy and how fast the machine was, for the median call's row.
        let machine = Calibration.measure("burst")
        let startRSS = megabytes(currentRSS())
        var configuration = EngineConfiguration.unbounded(scratch.database)
        if let events = ProcessInfo.processInfo.environment["SPOOL_BUFFER_EVENTS"].flatMap(Int.init) {
            configuration.writeBuffer = WriteBufferLimit(maximumEvents: events, maximumBytes: 512 << 20)
        }
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        // A histogram, not a sample per call: a million samples would be 8 MB
        // of the resident memory this measures.
        var calls = Histogram()
        let log = engine.eventLog!
        // What waits for the writer, sampled every 1,024 calls (one lock each).
        var depths: [Double] = []
        depths.reserveCapacity(count / 1_024 + 1)
        var largestWAL = 0
        // Resident memory every 8,192 calls, for the report's plot.
        var memory: [[Double]] = [[0, startRSS]]
        let started = now()
        let callerCPU = EventLog.threadCPUNanoseconds()
        for index in 0..<count {
            let before = now()
            try engine.recordRetrying("purchase", parameters: ListenerBenchmarks.parameters)
            calls.add(now() - before)
            if index & 1_023 == 1_023 {
                depths.append(Double(log.bufferedCount))
                largestWAL = max(largestWAL, fileSize(scratch.database.path + "-wal"))
                if index & 8_191 == 8_191 { memory.append([Double(index + 1), megabytes(currentRSS())]) }
            }
        }
        let recorded = now()
        let callerCPUPerEvent = Double(EventLog.threadCPUNanoseconds() - callerCPU) / Double(count)
        let waits = log.waitsForRoom
        try await engine.settle()
        let seconds = Double(now() - started) / 1e9
        let writerCPUPerEvent = log.writerCPUPerEvent ?? .nan
        let peak = megabytes(peakRSS())
        memory.append([Double(count), megabytes(currentRSS())])
        let stored = try await engine.storedEventCount(named: "purchase")
        await engine.close()
        let samples = calls
        let label = count >= 1_000_000 ? "\(count / 1_000_000)M" : "\(count / 1_000)k"
        report.add(
            Series(
                id: "burst/rss-\(label.lowercased())", name: "resident memory, \(label) unthrottled record() calls",
                xUnit: "events recorded", yUnit: "MB", points: memory))
        report.add(
            Row(
                area: "burst", name: "peak RSS, fresh process, \(label) unthrottled record() calls", value: peak,
                unit: "MB",
                detail:
                    "\(formatMegabytes(startRSS)) before opening; \(formatNumber(Double(count) / seconds)) events/s",
                exact: true))
        report.add(
            Row(
                area: "burst", name: "Spool's share of RSS, \(label) unthrottled record() calls",
                value: peak - startRSS,
                unit: "MB", detail: "peak RSS minus the process before opening",
                target: count >= 1_000_000 ? 10 : nil, comparison: count >= 1_000_000 ? .atMost : nil, exact: true))
        report.add(
            Row(
                area: "burst", name: "events lost in the \(label) burst", value: Double(count - stored), unit: "events",
                detail: "\(stored) of \(count) stored", target: 0, comparison: .atMost, exact: true))
        report.add(
            Row(
                area: "burst", name: "writer CPU / caller CPU per event, \(label) burst",
                value: writerCPUPerEvent / callerCPUPerEvent, unit: "×",
                detail:
                    "writer \(formatNumber(writerCPUPerEvent / 1_000)) µs, caller \(formatNumber(callerCPUPerEvent / 1_000)) µs of thread CPU per event; below 1 the writer keeps up",
                target: 1, comparison: .atMost))
        let depth = Samples(values: depths)
        let bound = EngineConfiguration().writeBuffer
        report.add(
            Row(
                area: "burst", name: "events waiting for the writer in the \(label) burst, median of samples",
                value: depth.median, unit: "events",
                detail:
                    "p90 \(formatNumber(depth.percentile(0.9))), max \(formatNumber(depth.max)) (bound: \(bound.maximumEvents) events or \(bound.maximumBytes >> 20) MiB); \(waits) of \(count) calls waited for room"
            ))
        report.add(
            Row(
                area: "burst", name: "largest WAL file seen during the \(label) burst", value: megabytes(largestWAL),
                unit: "MB",
                detail:
                    "sampled every 1,024 calls; the file is truncated \(formatNumber(EventLog.defaultShrinkDelay)) s after the writer goes idle"
            ))
        report.add(
            Row(
                area: "burst", name: "worst caller stall in the \(label) burst (buffer bound)", value: samples.max,
                unit: "µs",
                detail:
                    "p99.9 \(formatNumber(samples.percentile(0.999))) µs; callers wait for the writer past \(bound.maximumEvents) events or \(bound.maximumBytes >> 20) MiB"
            ))
        report.add(
            Row(
                area: "burst", name: "caller cost per record(10 parameters) in the \(label) burst, median",
                value: samples.median, unit: "µs",
                detail:
                    "validate + encode + append, \(label) calls; p99 \(formatNumber(samples.percentile(0.99))) µs, mean \(formatNumber(Double(recorded - started) / Double(count) / 1_000)) µs; machine: \(machine.summary)"
            ))
    }

    /// Holds the write lock from a second connection so nothing commits,
    /// records 20,000 events, and divides the growth of resident memory by
    /// them.
    func bufferedBytes() async throws {
        let scratch = Scratch("buffered")
        var configuration = EngineConfiguration.unbounded(scratch.database)
        configuration.writeBuffer = WriteBufferLimit(maximumEvents: 100_000, maximumBytes: 64 << 20)
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        try await engine.settle()
        let blocker = RawSQLite(path: scratch.database.path)
        blocker.exec("BEGIN IMMEDIATE")
        let count = 20_000
        for _ in 0..<200 { try engine.recordRetrying("purchase", parameters: ListenerBenchmarks.parameters) }
        let before = currentRSS()
        for _ in 0..<count { try engine.recordRetrying("purchase", parameters: ListenerBenchmarks.parameters) }
        let after = currentRSS()
        blocker.exec("COMMIT")
        try await engine.settle()
        await engine.close()
        let json = ListenerBenchmarks.encodedParameters.utf8.count
        guard let before, let after else {
            report.add(
                Row(
                    area: "burst", name: "memory per buffered event / its encoded JSON", value: .nan, unit: "×",
                    detail: "n/a on this platform (no current RSS to compare)"))
            return
        }
        let perEvent = Double(after - before) / Double(count)
        report.add(
            Row(
                area: "burst", name: "memory per buffered event / its encoded JSON", value: perEvent / Double(json),
                unit: "×",
                detail: "\(formatNumber(perEvent)) bytes for \(json) bytes of JSON (RSS growth over \(count) buffered)",
                target: 2, comparison: .atMost, exact: true))
    }
}

extension EventEngine {
    /// How many stored events carry `name`.
    func storedEventCount(named name: String) async throws -> Int {
        guard let database = databaseQueue else { return 0 }
        return try await database.run { connection in
            try connection.withStatement("SELECT count(*) FROM events WHERE name = ?") { statement in
                try statement.bind(name, at: 1)
                return try statement.step() ? statement.int(at: 0) : 0
            }
        }
    }
}

/// Call durations in 10 ns buckets up to 100 µs, and the exact maximum.
struct Histogram {
    private var buckets = [Int](repeating: 0, count: 10_001)
    private var count = 0
    private(set) var maximumNanoseconds: UInt64 = 0

    mutating func add(_ nanoseconds: UInt64) {
        buckets[Int(min(nanoseconds / 10, 10_000))] += 1
        count += 1
        maximumNanoseconds = Swift.max(maximumNanoseconds, nanoseconds)
    }

    /// Microseconds at quantile `p` (the bucket's upper edge).
    func percentile(_ p: Double) -> Double {
        let rank = Int((Double(count - 1) * p).rounded())
        var seen = 0
        for (index, bucketCount) in buckets.enumerated() {
            seen += bucketCount
            if seen > rank { return Double(index + 1) * 0.01 }
        }
        return max
    }

    var median: Double { percentile(0.5) }
    var max: Double { Double(maximumNanoseconds) / 1_000 }
}
