import Foundation

extension StoredEvent {
    /// The row a `SELECT` of ``columns`` ``fromEvents`` stands on, its
    /// sealed values opened on `connection`; nil when one will not open.
    init?(_ statement: Statement, on connection: Connection) {
        let id = statement.string(at: 1)
        guard
            let opened = connection.openEvent(
                readable: statement.string(at: 3), target: statement.optionalString(at: 9),
                sealed: statement.blob(at: 16), eventID: id)
        else { return nil }
        self.init(
            seq: statement.int64(at: 0), id: id, name: statement.string(at: 2),
            parametersJSON: opened.parametersJSON, recordedAt: statement.double(at: 4),
            sessionID: statement.optionalString(at: 5), priority: statement.int64(at: 6) != 0,
            uploaderOnly: statement.int64(at: 7) != 0)
        type = statement.string(at: 8)
        target = opened.target
        contextID = statement.isNull(at: 10) ? nil : statement.int64(at: 10)
        if !statement.isNull(at: 11) {
            let row = statement.int64(at: 11)
            var person = (userID: statement.optionalString(at: 13), traitsJSON: statement.string(at: 14))
            if let sealed = statement.blob(at: 17) {
                guard let opened = connection.openIdentity(sealed, row: row) else { return nil }
                person = opened
            }
            identityID = row
            identity = IdentityRow(
                id: row, anonymousID: statement.string(at: 12), userID: person.userID,
                traitsJSON: person.traitsJSON, createdAt: statement.double(at: 15))
        }
    }
}

/// One request's outcome, as the `upload_batches` table keeps it.
package struct UploadBatchRecord: Sendable {
    package var sentAt: Double
    package var firstSeq: Int64
    package var lastSeq: Int64
    package var firstEventID: String
    package var lastEventID: String
    package var eventCount: Int
    /// The ids as a JSON array, in request order.
    package var eventIDs: String
    package var status: Int?
    package var outcome: String
    package var detail: String?
    package var compressed: Bool
    package var bodyBytes: Int
    package var durationMilliseconds: Double

    package init(
        sentAt: Double, firstSeq: Int64, lastSeq: Int64, firstEventID: String, lastEventID: String, eventCount: Int,
        eventIDs: String, status: Int?, outcome: String, detail: String?, compressed: Bool, bodyBytes: Int,
        durationMilliseconds: Double
    ) {
        self.eventIDs = eventIDs
        self.sentAt = sentAt
        self.firstSeq = firstSeq
        self.lastSeq = lastSeq
        self.firstEventID = firstEventID
        self.lastEventID = lastEventID
        self.eventCount = eventCount
        self.status = status
        self.outcome = outcome
        self.detail = detail
        self.compressed = compressed
        self.bodyBytes = bodyBytes
        self.durationMilliseconds = durationMilliseconds
    }
}

// MARK: - Exact reads, dead letters and what the uploader learnt (on the database queue)

extension Connection {
    /// The uploader's consumer id: the one consumer that reads the
    /// `uploader_only` rows.
    package static let uploaderConsumer = "uploader"

    /// Deletes the dead letters of events at or before `position`.
    package func deleteDeadLetters(through position: Int64) throws {
        try withStatement("DELETE FROM dead_letters WHERE seq <= ?") { statement in
            try statement.bind(position, at: 1)
            try statement.step()
        }
    }

    /// The events still in the log among positions `first...last`, in log
    /// order: a request's events as they were sent (positions are never
    /// reused, so nothing else can be in that range; events the retention
    /// bound deleted meanwhile are missing).
    ///
    /// An event whose values will not open is set aside in the dead letters
    /// (``setAsideUndecryptable(_:now:)``) instead.
    package func readEvents(from first: Int64, through last: Int64, now: Double) throws -> [StoredEvent] {
        let (events, closed) = try withStatement(
            """
            SELECT \(StoredEvent.columns) \(StoredEvent.fromEvents) \
            WHERE e.seq BETWEEN ? AND ? ORDER BY e.seq
            """
        ) { statement in
            try statement.bind(first, at: 1)
            try statement.bind(last, at: 2)
            var events: [StoredEvent] = []
            var closed: [Int64] = []
            while try statement.step() {
                if let event = StoredEvent(statement, on: self) {
                    events.append(event)
                } else {
                    closed.append(statement.int64(at: 0))
                }
            }
            return (events, closed)
        }
        try setAsideUndecryptable(closed, now: now)
        return events
    }

    /// Deletes dead letters beyond `maximumCount` (oldest first) and those
    /// that failed before `failedBefore`, counting each kind in `counters`.
    ///
    /// - Returns: how many were deleted.
    @discardableResult
    package func enforceDeadLetterLimits(maximumCount: Int?, failedBefore: Double?) throws -> Int {
        var evicted = 0
        if let failedBefore {
            let aged = try withStatement("DELETE FROM dead_letters WHERE failed_at < ?") { statement in
                try statement.bind(failedBefore, at: 1)
                try statement.step()
                return changes
            }
            try addToCounter("dead_letters_evicted_age", aged)
            evicted += aged
        }
        if let maximumCount {
            let counted = try withStatement(
                """
                DELETE FROM dead_letters WHERE seq IN \
                (SELECT seq FROM dead_letters ORDER BY seq DESC LIMIT -1 OFFSET ?)
                """
            ) { statement in
                try statement.bind(max(0, maximumCount), at: 1)
                try statement.step()
                return changes
            }
            try addToCounter("dead_letters_evicted_count", counted)
            evicted += counted
        }
        return evicted
    }

    /// Puts the dead letters matching `status` and `reasonContaining` (nil:
    /// any) back at the tail of the log, oldest first, with their ids, for
    /// the uploader only; in one transaction. With a retention bound
    /// (`maximumRetained`), at most as many as it leaves room for, so that
    /// the next commit does not drop queued events to make room for them.
    ///
    /// - Returns: how many were put back, and the log's new head.
    package func requeueDeadLetters(status: Int?, reasonContaining: String?, maximumRetained: Int?) throws -> (
        count: Int, head: Int64
    ) {
        try sealingTransaction {
            var head = try headPosition()
            var room = Int.max
            if let maximumRetained {
                let oldest = try withStatement("SELECT min(seq) FROM events") { statement -> Int64? in
                    try statement.step() && !statement.isNull(at: 0) ? statement.int64(at: 0) : nil
                }
                let retained = oldest.map { Int(clamping: head - $0 + 1) } ?? 0
                room = max(0, maximumRetained - retained)
            }
            guard room > 0 else { return (0, head) }
            let matching = """
                FROM dead_letters WHERE (?1 IS NULL OR status = ?1) \
                AND (?2 IS NULL OR instr(reason, ?2) > 0)
                """
            let rows = try withStatement(
                """
                SELECT seq, id, name, parameters, recorded_at, session_id, type, target, identity_id, context_id, \
                sealed \(matching) ORDER BY seq LIMIT ?3
                """
            ) { statement in
                if let status { try statement.bind(status, at: 1) } else { try statement.bindNull(at: 1) }
                if let reasonContaining {
                    try statement.bind(reasonContaining, at: 2)
                } else {
                    try statement.bindNull(at: 2)
                }
                try statement.bind(room == .max ? -1 : room, at: 3)
                var rows: [StoredEvent] = []
                while try statement.step() {
                    let id = statement.string(at: 1)
                    // One whose parameters still will not open stays a dead
                    // letter: it is never sent as garbage.
                    guard
                        let opened = openEvent(
                            readable: statement.string(at: 3), target: statement.optionalString(at: 7),
                            sealed: statement.blob(at: 10), eventID: id)
                    else { continue }
                    var row = StoredEvent(
                        seq: statement.int64(at: 0), id: id, name: statement.string(at: 2),
                        parametersJSON: opened.parametersJSON, recordedAt: statement.double(at: 4),
                        sessionID: statement.optionalString(at: 5), priority: false)
                    row.type = statement.string(at: 6)
                    row.target = opened.target
                    row.identityID = statement.isNull(at: 8) ? nil : statement.int64(at: 8)
                    row.contextID = statement.isNull(at: 9) ? nil : statement.int64(at: 9)
                    rows.append(row)
                }
                return rows
            }
            guard !rows.isEmpty else { return (0, head) }
            var bytesTotal = try bytesTotal()
            try withStatement(
                """
                INSERT INTO events (seq, id, name, parameters, recorded_at, session_id, priority, uploader_only, \
                bytes_before, type, target, identity_id, context_id, sealed) \
                VALUES (?, ?, ?, ?, ?, ?, 0, 1, ?, ?, ?, ?, ?, ?)
                """
            ) { statement in
                for row in rows {
                    head += 1
                    try statement.bind(bytesTotal, at: 7)
                    bytesTotal += Int64(
                        Self.boundBytes(name: row.name, parametersJSON: row.parametersJSON, target: row.target))
                    try statement.bind(head, at: 1)
                    try statement.bind(row.id, at: 2)
                    try statement.bind(row.name, at: 3)
                    let sealed = try sealEvent(row.parametersJSON, target: row.target, eventID: row.id)
                    try statement.bind(sealed == nil ? row.parametersJSON : Self.sealedJSON, at: 4)
                    try statement.bindBlob(sealed, at: 12)
                    try statement.bind(row.recordedAt, at: 5)
                    try statement.bind(row.sessionID, at: 6)
                    try statement.bind(row.type, at: 8)
                    try statement.bind(sealed == nil ? row.target : nil, at: 9)
                    try statement.bind(row.identityID, at: 10)
                    try statement.bind(row.contextID, at: 11)
                    try statement.step()
                    statement.resetKeepingBindings()
                }
            }
            try withStatement("UPDATE log_head SET last_seq = ?, bytes_total = ? WHERE id = 1") { statement in
                try statement.bind(head, at: 1)
                try statement.bind(bytesTotal, at: 2)
                try statement.step()
            }
            try withStatement("DELETE FROM dead_letters WHERE seq = ?") { statement in
                for row in rows {
                    try statement.bind(row.seq, at: 1)
                    try statement.step()
                    statement.resetKeepingBindings()
                }
            }
            return (rows.count, head)
        }
    }

    /// Adds `amount` to the counter `name` (created at zero).
    package func addToCounter(_ name: String, _ amount: Int) throws {
        guard amount != 0 else { return }
        try withStatement(
            "INSERT INTO counters (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = value + excluded.value"
        ) { statement in
            try statement.bind(name, at: 1)
            try statement.bind(amount, at: 2)
            try statement.step()
        }
    }

    /// The counter `name`, 0 when it was never added to.
    package func counter(_ name: String) throws -> Int {
        try withStatement("SELECT value FROM counters WHERE name = ?") { statement in
            try statement.bind(name, at: 1)
            return try statement.step() ? statement.int(at: 0) : 0
        }
    }

    /// Whether the collector at `url` was found not to read gzip bodies.
    package func collectorRefusesGzip(_ url: String) throws -> Bool {
        try withStatement("SELECT gzip_refused_at IS NOT NULL FROM collectors WHERE url = ?") { statement in
            try statement.bind(url, at: 1)
            return try statement.step() && statement.int(at: 0) != 0
        }
    }

    /// Remembers that the collector at `url` does not read gzip bodies.
    package func markCollectorRefusesGzip(_ url: String, at time: Double) throws {
        try withStatement(
            """
            INSERT INTO collectors (url, gzip_refused_at) VALUES (?, ?) \
            ON CONFLICT (url) DO UPDATE SET gzip_refused_at = excluded.gzip_refused_at
            """
        ) { statement in
            try statement.bind(url, at: 1)
            try statement.bind(time, at: 2)
            try statement.step()
        }
    }

    /// How many rows `upload_batches` keeps at most.
    package static let uploadBatchesKept: Int64 = 1_000
    /// How many events the rows of `upload_batches` carry at most, together
    /// (their ids are kept: about 40 bytes each).
    package static let uploadBatchEventsKept: Int64 = 20_000

    /// Appends one request's outcome to `upload_batches`, keeping the last
    /// ``uploadBatchesKept`` rows, and no more than ``uploadBatchEventsKept``
    /// events between them.
    package func recordUploadBatch(_ record: UploadBatchRecord) throws {
        let before = try withStatement(
            "SELECT events_before + event_count FROM upload_batches ORDER BY id DESC LIMIT 1"
        ) { statement -> Int64 in
            try statement.step() ? statement.int64(at: 0) : 0
        }
        let id = try withStatement(
            """
            INSERT INTO upload_batches (sent_at, first_seq, last_seq, first_event_id, last_event_id, event_count, \
            event_ids, events_before, status, outcome, detail, compressed, body_bytes, duration_ms) \
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?13, ?14, ?7, ?8, ?9, ?10, ?11, ?12)
            """
        ) { statement -> Int64 in
            try statement.bind(record.eventIDs, at: 13)
            try statement.bind(before, at: 14)
            try statement.bind(record.sentAt, at: 1)
            try statement.bind(record.firstSeq, at: 2)
            try statement.bind(record.lastSeq, at: 3)
            try statement.bind(record.firstEventID, at: 4)
            try statement.bind(record.lastEventID, at: 5)
            try statement.bind(record.eventCount, at: 6)
            if let status = record.status { try statement.bind(status, at: 7) } else { try statement.bindNull(at: 7) }
            try statement.bind(record.outcome, at: 8)
            try statement.bind(record.detail.map { String($0.prefix(500)) }, at: 9)
            try statement.bind(record.compressed ? 1 : 0, at: 10)
            try statement.bind(record.bodyBytes, at: 11)
            try statement.bind(record.durationMilliseconds, at: 12)
            try statement.step()
            return lastInsertRowID
        }
        // The rows to delete are the oldest ones (both bounds grow with
        // `id`): the first row to keep is found by scanning from the
        // oldest, which reads the rows deleted now and one more, not the
        // whole table (reading `events_before` steps over `event_ids`, a
        // few kilobytes per row). The newest row stays, whatever its size.
        // Two statements, not a DELETE with a subquery: SQLite gives that
        // one a statement journal, which with 16 KiB pages spills to a
        // temporary file on most requests.
        let events = before + Int64(record.eventCount)
        let withinEvents = try withStatement(
            "SELECT id FROM upload_batches WHERE events_before >= ? ORDER BY id LIMIT 1"
        ) { statement -> Int64 in
            try statement.bind(events - Self.uploadBatchEventsKept, at: 1)
            return try statement.step() ? statement.int64(at: 0) : id
        }
        try withStatement("DELETE FROM upload_batches WHERE id < ?") { statement in
            try statement.bind(max(id - Self.uploadBatchesKept + 1, withinEvents), at: 1)
            try statement.step()
        }
    }
}

extension Connection {
    /// Pauses uploads for every process using the file (at `now`), or
    /// resumes them.
    package func setUploadsPaused(_ paused: Bool, at now: Double) throws {
        guard paused else { return try execute("DELETE FROM upload_pause") }
        try withStatement("INSERT OR IGNORE INTO upload_pause (id, paused_at) VALUES (1, ?)") { statement in
            try statement.bind(now, at: 1)
            try statement.step()
        }
    }

    /// Whether uploads are paused, whether any batch is handed to the
    /// system, and whether any loss waits to be reported (`upload_loss`), in
    /// one statement.
    package func uploadGates() throws -> (paused: Bool, handedOff: Bool, lossCounted: Bool) {
        try withStatement(
            """
            SELECT EXISTS (SELECT 1 FROM upload_pause), EXISTS (SELECT 1 FROM background_transfers), \
            EXISTS (SELECT 1 FROM upload_loss)
            """
        ) { statement in
            guard try statement.step() else { return (false, false, false) }
            return (statement.int(at: 0) != 0, statement.int(at: 1) != 0, statement.int(at: 2) != 0)
        }
    }

    /// Whether uploads are paused.
    package func uploadsPaused() throws -> Bool {
        try withStatement("SELECT count(*) FROM upload_pause") { statement in
            try statement.step() && statement.int(at: 0) > 0
        }
    }
}
