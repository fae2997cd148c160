import Foundation
import Spool
import SpoolStorage

/// The event log: append-until-durable beside a hand-written SQLite baseline,
/// the caller's cost per append, cost at growing backlogs, memory, and group
/// commit under synchronous=FULL.
struct AppendBenchmarks {
    let quick: Bool
    let report: Report

    /// A realistic 10-key parameter object, as Spool would store it.
    static let parameters =
        #"{"screen":"checkout","price":19.99,"currency":"EUR","items":3,"coupon":null,"first":true,"#
        + #""category":"shoes","sku":"SKU-48213","step":2,"at":"2026-11-29T10:15:30.123Z"}"#
    static let name = "purchase"
    static let session = "0190f3a2-7c1e-7b44-9a55-6f1d2e3c4b5a"

    static func record(_ priority: Bool = false) -> EventRecord {
        EventRecord(
            name: Self.name, parametersJSON: Self.parameters, recordedAt: Date().timeIntervalSince1970,
            sessionID: Self.session, priority: priority)
    }

    func run() async throws {
        try await throughput()
        try await callerCost()
        try report.runIsolated("append-backlog", quick: quick)
        try await groupCommitUnderFull()
    }

    // MARK: - (a) append-until-durable vs raw SQLite

    /// Appends `count` events and waits until the last is durable; events/s.
    func spoolAppendUntilDurable(count: Int, synchronous: SynchronousMode = .normal) async throws -> Double {
        let scratch = Scratch("append")
        let log = EventLog(
            database: try DatabaseQueue(
                path: scratch.database.path, options: ConnectionOptions(fullSynchronous: synchronous == .full)))
        let start = now()
        for _ in 0..<count { try log.appendRetrying(Self.record()) }
        try await log.waitUntilAllDurable()
        let elapsed = seconds(since: start)
        await log.close()
        log.database.close()
        return Double(count) / elapsed
    }

    func rawInsert(
        count: Int, perTransaction: Int = 1_000, synchronous: String = "NORMAL", checked: Bool = false,
        parameters: String = AppendBenchmarks.parameters
    ) -> Double {
        let scratch = Scratch("raw")
        let raw = RawSQLite(path: scratch.database.path, synchronous: synchronous)
        if checked { raw.createCheckedEventsTable() } else { raw.createPlainEventsTable() }
        let start = now()
        raw.insertEvents(
            count: count, perTransaction: perTransaction, id: "0190f3a2-7c1e-7b44-9a55-6f1d2e3c4b5a",
            name: Self.name, parameters: parameters, session: Self.session)
        return Double(count) / seconds(since: start)
    }

    func throughput() async throws {
        let count = quick ? 100_000 : 300_000
        let rounds = quick ? 3 : 7
        var checked: [Double] = []
        let comparison = try await Comparison.measure(rounds: rounds, target: 0.7) {
            try await spoolAppendUntilDurable(count: count)
        } baseline: {
            defer { checked.append(rawInsert(count: count, checked: true)) }
            return rawInsert(count: count)
        }
        report.add(
            comparison, area: "append", unit: "events/s", spool: "Spool append until durable",
            spoolDetail: "median of \(rounds) × \(count)", baseline: "raw SQLite insert, 1000 rows/txn (baseline)",
            ratio: "ratio Spool / raw SQLite", target: 0.7)
        report.add(
            Row(
                area: "append", name: "raw SQLite, Spool's CHECKs, 1000 rows/txn",
                value: Samples(values: checked).median,
                unit: "events/s", detail: "what the schema's constraints cost, for reference"))
    }

    // MARK: - (b) caller cost

    func callerCost() async throws {
        let scratch = Scratch("caller")
        let log = EventLog(database: try DatabaseQueue(path: scratch.database.path))
        let chunks = quick ? 50 : 200
        var samples: [Double] = []
        samples.reserveCapacity(chunks * 1_000)
        for _ in 0..<chunks {
            for _ in 0..<1_000 {
                let event = Self.record()
                let start = now()
                let receipt = try log.appendRetrying(event)
                samples.append(Double(now() - start))
                blackHole(receipt)
            }
            try await log.waitUntilAllDurable()
        }
        await log.close()
        log.database.close()
        let stats = Samples(values: samples)
        report.add(
            Row(
                area: "append", name: "caller cost per append (median)", value: stats.median / 1_000, unit: "µs",
                detail: "p99 \(formatNumber(stats.percentile(0.99) / 1_000)) µs over \(samples.count) calls",
                target: 2, comparison: .atMost))
    }

    // MARK: - (c) per-event cost at growing backlogs, and memory

    func backlogCost() async throws {
        let scratch = Scratch("backlog")
        let startRSS = megabytes(currentRSS())
        let log = EventLog(database: try DatabaseQueue(path: scratch.database.path))
        // Chunks of 10k: an app never buffers more than that in a few ms, and
        // the in-memory buffer is not what this phase measures.
        let measured = 10_000
        let rounds = quick ? 5 : 11
        var appended = 0
        var costs: [Int: Samples] = [:]
        for backlog in [10_000, 100_000, 1_000_000] {
            while appended < backlog {
                let chunk = min(10_000, backlog - appended)
                for _ in 0..<chunk { try log.appendRetrying(Self.record()) }
                try await log.waitUntilAllDurable()
                appended += chunk
            }
            var perEvent: [Double] = []
            for _ in 0..<rounds {
                let start = now()
                for _ in 0..<measured { try log.appendRetrying(Self.record()) }
                try await log.waitUntilAllDurable()
                perEvent.append(Double(now() - start) / Double(measured) / 1_000)
                appended += measured
            }
            let median = Samples(values: perEvent).median
            costs[backlog] = Samples(values: perEvent)
            report.add(
                Row(
                    area: "append", name: "per-event cost at \(backlog / 1_000)k backlog", value: median, unit: "µs",
                    detail: "append until durable, median of \(rounds) × \(measured)"))
        }
        let total = try await log.countEvents(after: 0)
        let walBytes = fileSize(scratch.database.path + "-wal")
        await log.close()
        log.database.close()
        // The rounds at the two backlogs cannot be paired (the backlog only
        // grows), so the ratio's interval spans both medians' intervals: a
        // noisy round at either end widens it instead of deciding the verdict.
        let (large, small) = (costs[1_000_000]!, costs[10_000]!)
        let low = large.medianInterval.low / small.medianInterval.high
        let high = large.medianInterval.high / small.medianInterval.low
        report.add(
            Row(
                area: "append", name: "cost at 1M backlog / cost at 10k backlog", value: large.median / small.median,
                unit: "×",
                detail:
                    "interval \(formatNumber(low))–\(formatNumber(high)) from each median's interval of \(rounds) rounds",
                target: 1.2, comparison: .atMost, low: low, high: high, rounds: rounds))
        report.add(
            Row(
                area: "append", name: "WAL file size at a 1M backlog", value: megabytes(walBytes), unit: "MB",
                detail: "overwritten in place up to the writer's RESTART at 16 MiB; truncated once the writer is idle"))
        report.add(
            Row(
                area: "append", name: "process RSS before opening (runtime, Foundation, FoundationNetworking)",
                value: startRSS, unit: "MB",
                detail: startRSS.isNaN
                    ? "n/a on this platform"
                    : "FoundationNetworking with libcurl and its TLS/krb5/ldap libraries is 6.4 MB of it on Linux"))
        let peak = megabytes(peakRSS())
        report.add(
            Row(
                area: "append", name: "peak RSS while building a 1M backlog", value: peak,
                unit: "MB", detail: "\(total) events in the log; \(formatMegabytes(startRSS)) before opening",
                exact: true))
        report.add(
            Row(
                area: "append", name: "Spool's share of RSS while building a 1M backlog", value: peak - startRSS,
                unit: "MB", detail: "peak RSS minus the process before opening (a fresh process)", target: 10,
                comparison: .atMost, exact: true))
    }

    // MARK: - (d) group commit under synchronous=FULL

    func groupCommitUnderFull() async throws {
        let perEventCount = quick ? 500 : 2_000
        let perEvent = rawInsert(count: perEventCount, perTransaction: 1, synchronous: "FULL")
        let grouped = try await spoolAppendUntilDurable(count: quick ? 50_000 : 200_000, synchronous: .full)
        report.add(
            Row(
                area: "append", name: "FULL: one transaction per event (raw SQLite)", value: perEvent, unit: "events/s",
                detail: "\(perEventCount) events, an fdatasync each"))
        report.add(
            Row(area: "append", name: "FULL: Spool group commit, streamed appends", value: grouped, unit: "events/s"))
        report.add(
            Row(
                area: "append", name: "FULL: group commit / one transaction per event", value: grouped / perEvent,
                unit: "×", target: 50, comparison: .atLeast))
        let concurrent = try await concurrentAwaitingCallers(callers: 16, each: quick ? 100 : 300)
        report.add(
            Row(
                area: "append", name: "FULL: 16 callers each awaiting every event", value: concurrent, unit: "events/s",
                detail: "\(formatNumber(concurrent / perEvent))× per-event transactions"))
    }

    /// Many callers, each appending one event and awaiting its durability
    /// before the next: the shape of `recordDurably` under load.
    func concurrentAwaitingCallers(callers: Int, each: Int) async throws -> Double {
        let scratch = Scratch("concurrent")
        let log = EventLog(
            database: try DatabaseQueue(path: scratch.database.path, options: ConnectionOptions(fullSynchronous: true)))
        let start = now()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<callers {
                group.addTask {
                    for _ in 0..<each {
                        try await log.waitUntilDurable(try log.appendRetrying(Self.record()))
                    }
                }
            }
            try await group.waitForAll()
        }
        let rate = Double(callers * each) / seconds(since: start)
        await log.close()
        log.database.close()
        return rate
    }
}
