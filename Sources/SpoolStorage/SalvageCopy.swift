import CSQLite
import Foundation

/// Copies the rows a ``SalvageSource`` can still read into a fresh database,
/// table by table, in transactions of ``batch`` rows.
///
/// The events keep their ids, order and contents. Their positions close up
/// over the ones lost, ending at the old head: a recovered event's `seq` is
/// the head less the recovered events after it. Each consumer's position
/// moves with them (it keeps exactly the recovered events it had not
/// finished), and the events it lost count in its `dropped`, as if the queue
/// bound had dropped them: a durable listener hears of them through
/// `onMissed`, the uploader in its statistics. So the log has no gaps, and
/// no position is handed out twice.
struct SalvageCopy {
    let reader: SalvageSource
    let fresh: Connection
    /// The mark's head, when the mark names the damaged file.
    let markHead: Int64?

    /// Rows per transaction in the fresh file.
    static let batch = 10_000

    init(from reader: SalvageSource, into fresh: Connection, mark: StoreMark.Value?) {
        self.reader = reader
        self.fresh = fresh
        let identity = reader.identity
        markHead = mark.flatMap { mark in identity == mark.identity ? mark.head : nil }
    }

    /// A consumer row as found.
    private struct Consumer {
        var id: String
        var position: Int64
        var updatedAt: Double
        var dropped: Int64
        var droppedReported: Int64
    }

    func run(_ outcome: inout SalvageOutcome) throws {
        let sourceHead = reader.integer("SELECT last_seq FROM log_head WHERE id = 1")
        var complete = sourceHead != nil
        try fresh.execute(
            """
            CREATE TEMP TABLE salvaged_events (seq INTEGER PRIMARY KEY, id TEXT NOT NULL, name TEXT NOT NULL, \
            parameters TEXT NOT NULL, recorded_at REAL NOT NULL, session_id TEXT, priority INTEGER NOT NULL, \
            uploader_only INTEGER NOT NULL, type TEXT NOT NULL, target TEXT, identity_id INTEGER, context_id INTEGER, \
            sealed BLOB, launch INTEGER, launch_ms INTEGER)
            """)
        defer {
            // try?: the temporary table goes with the connection anyway.
            try? fresh.execute("DROP TABLE IF EXISTS temp.salvaged_events")
        }
        let events = try batched { try copyEvents(row: $0) }
        let (consumers, consumerScan) = try readConsumers()
        let history = try batched { try copyHistory(row: $0) }
        let deadLetters = try batched { try copyDeadLetters(row: $0) }
        var scans = [events, consumerScan, history.scan, deadLetters]
        for table in try otherTables() {
            scans.append(try batched { try copyTable(table, row: $0) })
        }
        for scan in scans where scan.failures > 0 || scan.unreadable {
            complete = false
        }

        let (recoveredEvents, lowestSeq, newestSeq) = try eventBounds()
        let head = [sourceHead, markHead, newestSeq, consumers.map(\.position).max()].compactMap { $0 }.max() ?? 0
        // Positions expected to hold events: after the lowest consumer (or
        // the oldest event recovered) up to the head. The front counts only
        // when reading failed there: a consumer may legitimately start below
        // the oldest event (registered after an erasure or a drop).
        let lowest = consumers.map(\.position).min() ?? lowestSeq.map { $0 - 1 } ?? head
        let start: Int64
        if let lowestSeq, !events.failedBeforeFirstRow {
            start = max(lowest, lowestSeq - 1)
        } else {
            start = events.failures > 0 ? lowest : head
        }
        let lostEvents = max(0, head - start - Int64(try recoveredCount(after: start)))

        try batched { row in try moveEvents(base: head - Int64(recoveredEvents), row: row) }
        try fresh.transaction {
            // What the byte bound counts (migration 0007): the bytes before
            // each recovered event, and the bytes of them all: its name,
            // parameters and target. A sealed value counts as its ciphertext
            // with its key id (the value less its fixed 30 bytes of format,
            // nonce and tag), which holds the target too.
            let bytes = """
                length(CAST(name AS BLOB)) + coalesce(length(sealed) - 30, \
                length(CAST(parameters AS BLOB)) + coalesce(length(CAST(target AS BLOB)), 0))
                """
            try fresh.execute(
                """
                UPDATE events SET bytes_before = running.before \
                FROM (SELECT seq, coalesce(sum(\(bytes)) \
                OVER (ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before \
                FROM events) AS running WHERE running.seq = events.seq;
                UPDATE log_head SET bytes_total = (SELECT coalesce(sum(\(bytes)), 0) FROM events)
                """)
            try fresh.notePendingTargets()
            // The erasure count (migration 0009), which other processes
            // compare with the one they know: unread, they see it move on.
            let erasures = reader.integer("SELECT erasures FROM log_head WHERE id = 1") ?? 0
            try fresh.withStatement("UPDATE log_head SET last_seq = ?, erasures = ? WHERE id = 1") { statement in
                try statement.bind(head, at: 1)
                try statement.bind(erasures, at: 2)
                try statement.step()
            }
            // What the uploader lost the collector hears of (before it first
            // ran, every event lost).
            if !consumers.contains(where: { $0.id == Connection.uploaderConsumer }) {
                try fresh.countLoss(.salvaged, Int(clamping: lostEvents))
            }
            for consumer in consumers {
                let position = head - Int64(try recoveredCount(after: consumer.position))
                let lost = max(0, position - max(consumer.position, start))
                if consumer.id == Connection.uploaderConsumer { try fresh.countLoss(.salvaged, Int(clamping: lost)) }
                try fresh.withStatement(
                    """
                    INSERT INTO consumers (id, position, updated_at, dropped, dropped_reported) \
                    VALUES (?, ?, ?, ?, ?)
                    """
                ) { statement in
                    try statement.bind(consumer.id, at: 1)
                    try statement.bind(position, at: 2)
                    try statement.bind(consumer.updatedAt, at: 3)
                    try statement.bind(consumer.dropped + lost, at: 4)
                    try statement.bind(consumer.droppedReported, at: 5)
                    try statement.step()
                }
            }
        }
        outcome.head = head
        outcome.recovered = SalvageOutcome.Rows(
            events: recoveredEvents, consumers: consumers.count, history: history.scan.accepted,
            deadLetters: deadLetters.accepted)
        outcome.lost = SalvageOutcome.Rows(events: Int(lostEvents), history: history.lost)
        outcome.complete = complete
    }

    // MARK: - Events

    /// Reads the events into the temporary table, keeping their positions.
    private func copyEvents(row: () throws -> Void) throws -> SalvageSource.Scan {
        // Files from before migration 0006 have no uploader_only column.
        let uploaderOnly = (reader.columns["events"] ?? []).contains("uploader_only") ? "uploader_only" : "0"
        // Sealed parameters are copied sealed: they open with the event's
        // id, which the copy keeps.
        let sealed = sealedColumn("events")
        // Nor, before migration 0014, the clock of each event's age (a value
        // that is not an integer reads as none: the age falls back to the
        // wall clock's).
        let launch =
            (reader.columns["events"] ?? []).contains("launch_ms")
            ? """
            CASE WHEN typeof(launch) = 'integer' AND typeof(launch_ms) = 'integer' THEN launch END, \
            CASE WHEN typeof(launch) = 'integer' AND typeof(launch_ms) = 'integer' THEN launch_ms END
            """ : "NULL, NULL"
        let valid = """
            typeof(id) = 'text' AND length(id) > 0 AND typeof(name) = 'text' AND length(name) > 0 \
            AND CASE WHEN typeof(parameters) = 'text' AND json_valid(parameters) \
            THEN json_type(parameters) = 'object' OR (json_type(parameters) = 'null' AND typeof(\(sealed)) = 'blob') \
            ELSE 0 END \
            AND typeof(recorded_at) IN ('real', 'integer') AND typeof(session_id) IN ('text', 'null') \
            AND priority IN (0, 1) AND \(uploaderOnly) IN (0, 1) AND seq = rowid
            """
        let insert = try fresh.cachedStatement(
            """
            INSERT INTO temp.salvaged_events \
            (seq, id, name, parameters, recorded_at, session_id, priority, uploader_only, type, target, \
            identity_id, context_id, sealed, launch, launch_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """)
        defer { insert.reset() }
        let scan = try reader.scan(
            "events",
            select: """
                seq, id, name, parameters, recorded_at, session_id, priority, \(uploaderOnly), \(valid), \
                \(messageColumns("events")), \(sealed), \(launch)
                """
        ) { source in
            guard source.int64(at: 9) == 1 else { return false }
            try bindMessageColumns(from: source, at: 10, to: insert, at: 9)
            try insert.bindBlob(source.blob(at: 14).map(Array.init), at: 13)
            try bindLaunchColumns(from: source, at: 15, to: insert, at: 14)
            try insert.bind(source.int64(at: 1), at: 1)
            try insert.bindText(source.bytes(at: 2), at: 2)
            try insert.bindText(source.bytes(at: 3), at: 3)
            try insert.bindText(source.bytes(at: 4), at: 4)
            try insert.bind(source.double(at: 5), at: 5)
            if source.isNull(at: 6) {
                try insert.bindNull(at: 6)
            } else {
                try insert.bindText(source.bytes(at: 6), at: 6)
            }
            try insert.bind(source.int64(at: 7), at: 7)
            try insert.bind(source.int64(at: 8), at: 8)
            try insert.step()
            insert.resetKeepingBindings()
            try row()
            return true
        }
        return scan
    }

    /// How many events were recovered, and their lowest and highest positions.
    private func eventBounds() throws -> (count: Int, lowest: Int64?, highest: Int64?) {
        try fresh.withStatement("SELECT count(*), min(seq), max(seq) FROM temp.salvaged_events") { statement in
            _ = try statement.step()
            return (
                statement.int(at: 0), statement.isNull(at: 1) ? nil : statement.int64(at: 1),
                statement.isNull(at: 2) ? nil : statement.int64(at: 2)
            )
        }
    }

    /// Recovered events after `position`.
    private func recoveredCount(after position: Int64) throws -> Int {
        try fresh.withStatement("SELECT count(*) FROM temp.salvaged_events WHERE seq > ?") { statement in
            try statement.bind(position, at: 1)
            return try statement.step() ? statement.int(at: 0) : 0
        }
    }

    /// Writes the recovered events into the log, the n-th (from 1) at
    /// `base + n`, so the last is at the head.
    private func moveEvents(base: Int64, row: () throws -> Void) throws {
        let insert = try fresh.cachedStatement(
            """
            INSERT INTO events (seq, id, name, parameters, recorded_at, session_id, priority, uploader_only, \
            type, target, identity_id, context_id, sealed, launch, launch_ms) \
            SELECT ?, id, name, parameters, recorded_at, session_id, priority, uploader_only, \
            type, target, identity_id, context_id, sealed, launch, launch_ms FROM temp.salvaged_events WHERE seq = ?
            """)
        defer { insert.reset() }
        var next = base
        var after = Int64.min
        while true {
            // The next old position, one index lookup each.
            let old = try fresh.withStatement(
                "SELECT seq FROM temp.salvaged_events WHERE seq > ? ORDER BY seq LIMIT 1"
            ) { statement -> Int64? in
                try statement.bind(after, at: 1)
                return try statement.step() ? statement.int64(at: 0) : nil
            }
            guard let old else { break }
            next += 1
            try insert.bind(next, at: 1)
            try insert.bind(old, at: 2)
            try insert.step()
            insert.resetKeepingBindings()
            after = old
            try row()
        }
    }

    // MARK: - Consumers, history, dead letters

    private func readConsumers() throws -> ([Consumer], SalvageSource.Scan) {
        let columns = reader.columns["consumers"] ?? []
        let dropped = columns.contains("dropped") ? "dropped" : "0"
        let reported = columns.contains("dropped_reported") ? "dropped_reported" : "0"
        var consumers: [Consumer] = []
        let scan = try reader.scan(
            "consumers",
            select: """
                id, position, updated_at, \(dropped), \(reported), typeof(id) = 'text' AND length(id) > 0 \
                AND typeof(position) = 'integer' AND position >= 0 AND typeof(\(dropped)) = 'integer' \
                AND typeof(\(reported)) = 'integer'
                """
        ) { source in
            guard source.int64(at: 6) == 1 else { return false }
            consumers.append(
                Consumer(
                    id: source.string(at: 1), position: source.int64(at: 2), updatedAt: source.double(at: 3),
                    dropped: max(0, source.int64(at: 4)), droppedReported: max(0, source.int64(at: 5))))
            return true
        }
        return (consumers, scan)
    }

    private func copyHistory(row: () throws -> Void) throws -> (scan: SalvageSource.Scan, lost: Int) {
        // Files from before migration 0005 hold one row per occurrence.
        let occurrences = (reader.columns["event_history"] ?? []).contains("occurrences") ? "occurrences" : "1"
        let insert = try fresh.cachedStatement(
            """
            INSERT INTO event_history (id, name, recorded_at, occurrences) VALUES (?, ?, ?, ?) \
            ON CONFLICT (name, recorded_at) DO UPDATE SET occurrences = occurrences + excluded.occurrences
            """)
        defer { insert.reset() }
        var ids: (low: Int64, high: Int64)?
        let scan = try reader.scan(
            "event_history",
            select: """
                id, name, recorded_at, \(occurrences), typeof(name) = 'text' AND length(name) > 0 \
                AND typeof(recorded_at) IN ('real', 'integer') AND typeof(\(occurrences)) = 'integer' \
                AND \(occurrences) > 0 AND id = rowid
                """
        ) { source in
            guard source.int64(at: 5) == 1 else { return false }
            let id = source.int64(at: 1)
            try insert.bind(id, at: 1)
            try insert.bindText(source.bytes(at: 2), at: 2)
            try insert.bind(HistoryMillisecond.of(source.double(at: 3)), at: 3)
            try insert.bind(source.int64(at: 4), at: 4)
            try insert.step()
            insert.resetKeepingBindings()
            ids = (min(ids?.low ?? id, id), max(ids?.high ?? id, id))
            try row()
            return true
        }
        // History ids have no gaps: new rows take the next id, pruning
        // deletes from the lowest.
        let lost = ids.map { Int($0.high - $0.low + 1) - scan.accepted } ?? 0
        return (scan, max(0, lost))
    }

    // MARK: - Every other table

    /// The fresh file's tables that have no copy of their own above and that
    /// the damaged file has too (the collectors Spool learnt about, counters,
    /// the record of recent uploads…).
    private func otherTables() throws -> [String] {
        // `background_transfers`, `upload_loss_carried` and
        // `upload_batch_bounds` stay behind: their
        // positions are the old file's, and the fresh file's close up. Those
        // events go out again as new batches (a late report for one of them
        // settles nothing), with the loss counted (`upload_loss`, copied).
        let own: Set<String> = [
            "events", "consumers", "event_history", "dead_letters", "log_head", "schema_migrations",
            "background_transfers", "upload_loss_carried", "upload_batch_bounds",
        ]
        return try fresh.withStatement(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite!_%' ESCAPE '!' ORDER BY name"
        ) { statement in
            var names: [String] = []
            while try statement.step() { names.append(statement.string(at: 0)) }
            return names
        }.filter { !own.contains($0) && reader.columns[$0] != nil }
    }

    /// Copies the rows of `table` whose values the fresh table accepts, in
    /// the columns both files have, as they are (types included). A row the
    /// fresh table refuses is left behind.
    private func copyTable(_ table: String, row: () throws -> Void) throws -> SalvageSource.Scan {
        let freshColumns = try fresh.withStatement("SELECT name FROM pragma_table_info(?)") { statement in
            try statement.bind(table, at: 1)
            var names: [String] = []
            while try statement.step() { names.append(statement.string(at: 0)) }
            return names
        }
        let columns = freshColumns.filter { (reader.columns[table] ?? []).contains($0) }
        guard !columns.isEmpty else { return SalvageSource.Scan() }
        // Names from both files' own schemas, quoted; values are bound.
        let list = columns.map { "\"\($0)\"" }.joined(separator: ", ")
        let insert = try fresh.cachedStatement(
            "INSERT OR IGNORE INTO \"\(table)\" (\(list)) VALUES (\(columns.map { _ in "?" }.joined(separator: ", ")))")
        defer { insert.reset() }
        return try reader.scan(table, select: list) { source in
            for index in columns.indices {
                let code = sqlite3_bind_value(
                    insert.handle, Int32(index + 1), sqlite3_column_value(source.handle, Int32(index + 1)))
                guard code == SQLITE_OK else { return false }
            }
            do {
                try insert.step()
            } catch let error as SQLiteError where error.isRowSpecific {
                insert.resetKeepingBindings()
                return false
            }
            insert.resetKeepingBindings()
            try row()
            return true
        }
    }

    // MARK: - Transactions

    /// Runs `body` inside write transactions of the fresh file, committing
    /// after every ``batch`` rows it reports, so its WAL stays small.
    @discardableResult
    private func batched<T>(_ body: (_ row: () throws -> Void) throws -> T) throws -> T {
        try fresh.execute("BEGIN IMMEDIATE")
        var rows = 0
        do {
            let result = try body {
                rows += 1
                if rows % Self.batch == 0 { try fresh.execute("COMMIT; BEGIN IMMEDIATE") }
            }
            try fresh.execute("COMMIT")
            return result
        } catch {
            // try?: a failed ROLLBACK leaves nothing to undo; the caller
            // removes the fresh file.
            if fresh.isInTransaction { try? fresh.execute("ROLLBACK") }
            throw error
        }
    }
}
