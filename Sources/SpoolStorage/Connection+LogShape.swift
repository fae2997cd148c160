import CSQLite

/// The ends of the log as the file holds them, read at open: what the file
/// says was committed (`log_head`) beside what is there (the newest event).
///
/// Positions are assigned one after another from `log_head` in the
/// transaction that inserts the events, and events are only ever deleted
/// from the front (finished by every consumer, the retention bound) or all
/// at once (finished, or erased). So whenever `events` holds a row, the
/// newest one is at the head. (The front proves nothing: a consumer
/// registered after an erasure or a retention drop starts below the oldest
/// event.)
package struct LogShape: Sendable, Hashable {
    /// `log_head.last_seq`: the highest position the file says was committed.
    package var head: Int64
    /// The newest event's position, nil when `events` is empty.
    package var newest: Int64?
    /// What names this file: see ``Connection/fileIdentity()``.
    package var identity: UInt64?

    package init(head: Int64, newest: Int64?, identity: UInt64?) {
        self.head = head
        self.newest = newest
        self.identity = identity
    }

    /// Events the file says were committed and does not hold: the positions
    /// after the newest event up to the head. 0 in a healthy file.
    package var missingEvents: Int64 {
        guard let newest, newest < head else { return 0 }
        return head - newest
    }

    /// True when an event sits past the head: the next commit would be
    /// handed a position already taken, and every row it wrote refused.
    package var eventsPastHead: Bool {
        (newest ?? 0) > head
    }
}

extension Connection {
    /// Reads the ends of the log (see ``LogShape``) — and, as the first read
    /// of each table after open, the lowest consumer's position and the
    /// first event after it (where uploads and durable listeners start
    /// reading), the first history row and the last dead letter, so a
    /// damaged page on any of those paths is found here (`SQLITE_CORRUPT`)
    /// rather than later. A handful of index lookups, whatever the backlog.
    package func logShape() throws -> LogShape {
        try withStatement(
            """
            SELECT (SELECT last_seq FROM log_head WHERE id = 1), \
            (SELECT max(seq) FROM events), \
            (SELECT applied_at FROM schema_migrations WHERE version = 1), \
            (SELECT min(seq) FROM events WHERE seq > coalesce((SELECT min(position) FROM consumers), 0)), \
            (SELECT min(id) FROM event_history), \
            (SELECT max(seq) FROM dead_letters)
            """
        ) { statement in
            _ = try statement.step()
            func optional(_ column: Int32) -> Int64? {
                statement.isNull(at: column) ? nil : statement.int64(at: column)
            }
            return LogShape(
                head: optional(0) ?? 0, newest: optional(1),
                identity: statement.isNull(at: 2) ? nil : statement.double(at: 2).bitPattern)
        }
    }

    /// What names this database file, as opposed to another one created at
    /// the same path later: the moment its first migration was applied
    /// (`schema_migrations`, version 1), as the bits of that REAL. Nil when
    /// it cannot be read.
    package func fileIdentity() throws -> UInt64? {
        try withStatement("SELECT applied_at FROM schema_migrations WHERE version = 1") { statement in
            try statement.step() ? statement.double(at: 0).bitPattern : nil
        }
    }

    /// The identity of the database file at `path`, read through a
    /// read-only handle of its own; nil when it cannot be opened or read.
    package static func fileIdentity(at path: String) -> UInt64? {
        var handle: OpaquePointer?
        guard sqlite3_open_v2(path, &handle, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nil) == SQLITE_OK,
            let handle
        else {
            sqlite3_close_v2(handle)
            return nil
        }
        let reader = Connection(adopting: handle, path: path)
        defer { reader.close() }
        do {
            return try reader.fileIdentity()
        } catch {
            return nil
        }
    }

    /// Moves every position up to end at `head`, the high-water mark's,
    /// when a lost WAL took the commits after the file's `log_head` with
    /// it: those positions were handed out (and some of their events
    /// delivered or uploaded) and are never handed out again. The events the
    /// file kept move up by the difference, in order and without gaps, and
    /// each consumer's position with them; the missing events count in
    /// every consumer's `dropped`, as a salvage counts what it lost, and in
    /// `upload_loss` (``LossCause/walLost``). Two passes over the log: only
    /// when loss was found.
    package func closeUpPositions(toHead head: Int64) throws {
        try transaction {
            let gap = head - (try headPosition())
            guard gap > 0 else { return }
            // Through negative positions: moving each row straight up could
            // meet a row not moved yet.
            try withStatement("UPDATE events SET seq = -(seq + ?)") { statement in
                try statement.bind(gap, at: 1)
                try statement.step()
            }
            try execute("UPDATE events SET seq = -seq")
            // The collector hears of them too: some may have reached it
            // before they went, which no one can tell now.
            try countLoss(.walLost, Int(clamping: gap))
            try withStatement(
                "UPDATE consumers SET position = min(position + ?1, ?2), dropped = dropped + ?1"
            ) { statement in
                try statement.bind(gap, at: 1)
                try statement.bind(head, at: 2)
                try statement.step()
            }
            try withStatement("UPDATE log_head SET last_seq = ? WHERE id = 1") { statement in
                try statement.bind(head, at: 1)
                try statement.step()
            }
        }
    }

    /// Copies what the WAL holds into the database file, waiting for no one
    /// (a reader elsewhere only leaves part of it for later).
    package func checkpointPassive() {
        sqlite3_wal_checkpoint_v2(handle, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
    }

    /// What the log, the history and its kept property values hold now:
    /// the log's span of positions and its bytes (migration 0007), and the
    /// spans of the history's and the values' ids. Each is deleted from the
    /// lowest; the only gaps in the log are events set aside as
    /// undecryptable, which the span still counts.
    package func heldAmounts() throws -> (events: Int, bytes: Int, historyRows: Int, valueRows: Int) {
        try withStatement(
            """
            SELECT (SELECT coalesce(max(seq) - min(seq) + 1, 0) FROM events), \
            (SELECT bytes_total FROM log_head WHERE id = 1) \
            - coalesce((SELECT bytes_before FROM events ORDER BY seq LIMIT 1), \
            (SELECT bytes_total FROM log_head WHERE id = 1)), \
            (SELECT coalesce(max(id) - min(id) + 1, 0) FROM event_history), \
            (SELECT coalesce(max(id) - min(id) + 1, 0) FROM event_history_values)
            """
        ) { statement in
            _ = try statement.step()
            return (statement.int(at: 0), statement.int(at: 1), statement.int(at: 2), statement.int(at: 3))
        }
    }
}
