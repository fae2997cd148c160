import Foundation

/// The log's bounds: when it holds more than any of them, the oldest events
/// give way, even if a consumer has not finished them (each consumer counts
/// what it lost in `consumers.dropped`).
package struct QueueBounds: Sendable, Hashable {
    /// The most events.
    package var count: Int?
    /// The most bytes of names, parameters and targets (UTF-8).
    package var bytes: Int?
    /// The oldest an event may be, in seconds since it was recorded.
    package var age: TimeInterval?
    /// The count and byte bounds are the ones the free-space guard froze:
    /// what they drop is the guard's loss (``LossCause/freeSpace``).
    package var freeSpace: Bool

    package init(count: Int? = nil, bytes: Int? = nil, age: TimeInterval? = nil, freeSpace: Bool = false) {
        self.count = count.map { max(1, $0) }
        self.bytes = bytes.map { max(1, $0) }
        self.age = age.map { max(0, $0) }
        self.freeSpace = freeSpace
    }

    package var isEmpty: Bool { count == nil && bytes == nil && age == nil }
}

/// How many events each bound dropped in one commit.
package struct QueueDrops: Sendable, Hashable {
    package var count = 0
    package var bytes = 0
    package var age = 0

    package init(count: Int = 0, bytes: Int = 0, age: Int = 0) {
        self.count = count
        self.bytes = bytes
        self.age = age
    }

    package var total: Int { count + bytes + age }
}

extension Connection {
    /// What one event counts for against the byte bound: its name,
    /// parameters and target (a group's id, an alias's previous user id),
    /// UTF-8.
    package static func boundBytes(name: String, parametersJSON: String, target: String?) -> Int {
        name.utf8.count + parametersJSON.utf8.count + (target?.utf8.count ?? 0)
    }

    /// The bytes of every event ever appended (`log_head.bytes_total`).
    package func bytesTotal() throws -> Int64 {
        try withStatement("SELECT bytes_total FROM log_head WHERE id = 1") { statement in
            try statement.step() ? statement.int64(at: 0) : 0
        }
    }

    /// Applies `bounds` after an append that left the log's head at `head`
    /// and its byte total at `bytesTotal`, inside the append transaction:
    /// the count first, then the bytes, then the age (at most 1,024 events
    /// for age per call), each deleting a prefix of the log. Counts what each
    /// dropped in `counters` (`dropped_count`, `dropped_bytes`, `dropped_age`),
    /// and what the uploader lost to each in `upload_loss`.
    package func enforceBounds(_ bounds: QueueBounds, head: Int64, bytesTotal: Int64, now: Double) throws
        -> QueueDrops
    {
        var drops = QueueDrops()
        guard !bounds.isEmpty else { return drops }
        if let maximum = bounds.count {
            drops.count = try dropPrefix(
                through: head - Int64(maximum), loss: bounds.freeSpace ? .freeSpace : .queueCount)
        }
        if let maximum = bounds.bytes, let oldest = try oldestRow(), bytesTotal - oldest.bytesBefore > maximum {
            // Keep the shortest suffix that fits: the first row whose
            // bytes_before leaves at most `maximum` after it (binary search
            // over positions: bytes_before grows with seq).
            let floor = bytesTotal - Int64(maximum)
            var (low, high) = (oldest.seq, head)
            while low < high {
                let middle = low + (high - low) / 2
                if let before = try bytesBefore(atOrAfter: middle), before >= floor {
                    high = middle
                } else {
                    low = middle + 1
                }
            }
            drops.bytes = try dropPrefix(through: low - 1, loss: bounds.freeSpace ? .freeSpace : .queueBytes)
        }
        if let maximum = bounds.age, let oldest = try oldestRow(), oldest.recordedAt < now - maximum {
            let boundary = try withStatement(
                """
                SELECT max(seq) FROM (SELECT seq, recorded_at FROM events ORDER BY seq LIMIT 1024) \
                WHERE seq < coalesce((SELECT min(seq) FROM (SELECT seq, recorded_at FROM events \
                ORDER BY seq LIMIT 1024) WHERE recorded_at >= ?1), 9223372036854775807)
                """
            ) { statement -> Int64? in
                try statement.bind(now - maximum, at: 1)
                return try statement.step() && !statement.isNull(at: 0) ? statement.int64(at: 0) : nil
            }
            if let boundary { drops.age = try dropPrefix(through: boundary, loss: .queueAge) }
        }
        try addToCounter("dropped_count", drops.count)
        try addToCounter("dropped_bytes", drops.bytes)
        try addToCounter("dropped_age", drops.age)
        return drops
    }

    /// The oldest event's position, bytes before it and time.
    private func oldestRow() throws -> (seq: Int64, bytesBefore: Int64, recordedAt: Double)? {
        try withStatement("SELECT seq, bytes_before, recorded_at FROM events ORDER BY seq LIMIT 1") { statement in
            try statement.step() ? (statement.int64(at: 0), statement.int64(at: 1), statement.double(at: 2)) : nil
        }
    }

    private func bytesBefore(atOrAfter seq: Int64) throws -> Int64? {
        try withStatement("SELECT bytes_before FROM events WHERE seq >= ? ORDER BY seq LIMIT 1") { statement in
            try statement.bind(seq, at: 1)
            return try statement.step() ? statement.int64(at: 0) : nil
        }
    }

    /// Deletes every event at or before `boundary`, moving every consumer
    /// that had not finished them past them and counting what it lost; what
    /// the uploader lost counts as `loss` for the collector.
    ///
    /// - Returns: how many of the deleted events some consumer had not
    ///   finished (with no consumer: every one).
    @discardableResult
    package func dropPrefix(through boundary: Int64, loss: LossCause? = nil) throws -> Int {
        guard boundary > 0 else { return 0 }
        let (oldest, finished, uploader) = try withStatement(
            """
            SELECT (SELECT min(seq) FROM events), (SELECT min(position) FROM consumers), \
            (SELECT position FROM consumers WHERE id = ?)
            """
        ) { statement -> (Int64?, Int64?, Int64?) in
            try statement.bind(Self.uploaderConsumer, at: 1)
            _ = try statement.step()
            return (
                statement.isNull(at: 0) ? nil : statement.int64(at: 0),
                statement.isNull(at: 1) ? nil : statement.int64(at: 1),
                statement.isNull(at: 2) ? nil : statement.int64(at: 2)
            )
        }
        guard let oldest, oldest <= boundary else { return 0 }
        let lost = Int(clamping: max(0, boundary - max(oldest - 1, finished ?? oldest - 1)))
        if let loss {
            // Before the uploader first ran, it had none of them.
            try countLoss(loss, Int(clamping: max(0, boundary - max(oldest - 1, uploader ?? 0))))
        }
        // Dead letters put back (`uploader_only`) are the uploader's alone:
        // another consumer never had them to lose.
        try withStatement(
            """
            UPDATE consumers SET dropped = dropped + (?1 - max(position, ?2 - 1)) \
            - CASE WHEN id = ?4 THEN 0 ELSE (SELECT count(*) FROM events \
            WHERE seq > max(consumers.position, ?2 - 1) AND seq <= ?1 AND uploader_only = 1) END, \
            position = ?1, updated_at = ?3 WHERE position < ?1
            """
        ) { statement in
            try statement.bind(boundary, at: 1)
            try statement.bind(oldest, at: 2)
            try statement.bind(clock.now, at: 3)
            try statement.bind(Self.uploaderConsumer, at: 4)
            try statement.step()
        }
        try withStatement("DELETE FROM events WHERE seq <= ?") { statement in
            try statement.bind(boundary, at: 1)
            try statement.step()
        }
        return lost
    }
}
