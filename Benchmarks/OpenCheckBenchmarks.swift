import Foundation
import Spool
import SpoolStorage

/// What `start()` pays to find loss it can see, at a large backlog: the
/// open lock, the damaged copies' expiry, the high-water mark beside the
/// file, the file's size against its page size, and the ends of its log —
/// in a fresh process on a database with 1M events pending, beside the
/// whole `start()` they are part of, measured in the same processes.
///
/// Registered in main.swift with the phase `open-check` and the area
/// `footprint`.
struct OpenCheckBenchmarks {
    let quick: Bool
    let report: Report

    var count: Int { quick ? 200_000 : 1_000_000 }
    var label: String { quick ? "200k" : "1M" }

    /// `backlog`: a file with ``count`` events pending, no engine open on it.
    func run(on backlog: Scratch) throws {
        let database = backlog.database.path
        var checks: [Double] = []
        var starts: [Double] = []
        let processes = quick ? 3 : 7
        for _ in 0..<processes {
            let values = try report.runIsolatedValues("open-check", ["--database", database])
            checks.append(values["checks"] ?? .nan)
            starts.append(values["start"] ?? .nan)
        }
        // Each process measures both, so the ratio is taken per process and
        // judged on its median, with that median's interval.
        let ratios = Samples(values: zip(checks, starts).map { $0 / 1_000 / $1 })
        let interval = ratios.medianInterval
        report.add(
            Row(
                area: "footprint", name: "start()'s loss checks, \(label) events pending", value: ratios.median,
                unit: "× start()",
                detail:
                    "\(formatNumber(Samples(values: checks).median)) µs of \(formatNumber(Samples(values: starts).median)) ms: lock, copies' expiry, mark, file size, log ends; median of \(processes) fresh processes (checks \(checks.map { formatNumber($0) }.joined(separator: ", ")) µs)",
                target: 0.05, comparison: .atMost, low: interval.low, high: interval.high, rounds: processes))
        try markPerCommit()
    }

    /// What raising the mark adds to each commit: the read and write of 64
    /// bytes after it, against a commit of one event on the same disk, in
    /// the same run.
    func markPerCommit() throws {
        let scratch = Scratch("mark")
        let commits = quick ? 500 : 2_000
        let database = try DatabaseQueue(path: scratch.database.path)
        defer { database.close() }
        let record = AppendBenchmarks.record()
        let committing = now()
        for _ in 0..<commits {
            try database.sync { connection in
                try connection.transaction {
                    let head = try connection.headPosition() + 1
                    try connection.withStatement(
                        "INSERT INTO events (seq, id, name, parameters, recorded_at) VALUES (?, ?, ?, ?, ?)"
                    ) { statement in
                        try statement.bind(head, at: 1)
                        try statement.bind(UUID().uuidString, at: 2)
                        try statement.bind(record.name, at: 3)
                        try statement.bind(record.parametersJSON, at: 4)
                        try statement.bind(record.recordedAt, at: 5)
                        try statement.step()
                    }
                    try connection.execute("UPDATE log_head SET last_seq = last_seq + 1")
                }
            }
        }
        let commit = Double(now() - committing) / Double(commits) / 1_000
        guard let mark = StoreMark(databasePath: scratch.database.path) else { return }
        let raises = 100_000
        let raising = now()
        for head in 1...raises { mark.advance(to: Int64(head), identity: 1) }
        let raise = Double(now() - raising) / Double(raises) / 1_000
        report.add(
            Row(
                area: "footprint", name: "raising the high-water mark / a one-event commit", value: raise / commit,
                unit: "×",
                detail:
                    "\(formatNumber(raise)) µs per raise vs \(formatNumber(commit)) µs per commit, once per group commit",
                target: 0.05, comparison: .atMost))
    }

    // MARK: - Phase (in a fresh process)

    /// The checks `start()` makes, timed alone on the file as the last
    /// process left it (the database opened in between, untimed), then a
    /// whole `start()` on it.
    static func measure(_ database: URL) async throws {
        let path = database.path
        var spent: UInt64 = 0
        func timed<T>(_ step: String, _ body: () throws -> T) rethrows -> T {
            let started = now()
            defer {
                spent += now() - started
                emitValue(step, Double(now() - started) / 1_000)
            }
            return try body()
        }
        let mark = timed("open-mark") { StoreMark(databasePath: path) }
        let found = timed("lock-expiry-read") { () -> StoreMark.Value? in
            mark?.lock()
            DamagedCopies(databasePath: path).deleteDamaged(before: Date().addingTimeInterval(-7 * 86_400))
            return mark?.read()
        }
        try timed("file-size") { try DatabaseFileCheck.checkWholePages(path) }
        let queue = try DatabaseQueue(path: path)
        let shape = try timed("log-ends") { try queue.sync { try $0.logShape() } }
        timed("write-unlock") {
            if let identity = shape.identity { mark?.write(StoreMark.Value(identity: identity, head: shape.head)) }
            mark?.unlock()
        }
        queue.close()
        blackHole(found)
        emitValue("checks", Double(spent) / 1_000)

        let engine = FootprintBenchmarks.engine(database, status: 503)
        let started = now()
        try await engine.start()
        emitValue("start", Double(now() - started) / 1e6)
        await engine.close()
    }
}
