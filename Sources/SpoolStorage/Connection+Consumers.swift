import Foundation

/// Where a newly registered consumer starts reading.
package enum ConsumerStart: Sendable {
    /// Before the oldest retained event: it receives the whole backlog.
    case oldest
    /// After the newest committed event: it receives only what comes next.
    case end
}

// MARK: - Consumer positions, batches and prefix deletion (on the database queue)

extension Connection {
    /// Registers `consumer` if it has no row yet and returns its position.
    ///
    /// One write transaction: another process registering the same consumer
    /// at the same moment (an app and its extension on first launch) finds
    /// the row the first one made.
    package func registerConsumer(_ consumer: String, startingAt start: ConsumerStart) throws -> Int64 {
        try transaction {
            if let position = try position(of: consumer) { return position }
            let position: Int64
            switch start {
            case .oldest: position = 0
            case .end: position = try headPosition()
            }
            try withStatement("INSERT INTO consumers (id, position, updated_at) VALUES (?, ?, ?)") { statement in
                try statement.bind(consumer, at: 1)
                try statement.bind(position, at: 2)
                try statement.bind(clock.now, at: 3)
                try statement.step()
            }
            return position
        }
    }

    /// The last position `consumer` finished, or nil when it is unknown.
    package func position(of consumer: String) throws -> Int64? {
        try withStatement("SELECT position FROM consumers WHERE id = ?") { statement in
            try statement.bind(consumer, at: 1)
            return try statement.step() ? statement.int64(at: 0) : nil
        }
    }

    /// The highest position ever assigned (0 for a new log), including events
    /// already deleted.
    package func headPosition() throws -> Int64 {
        try withStatement("SELECT last_seq FROM log_head WHERE id = 1") { statement in
            try statement.step() ? statement.int64(at: 0) : 0
        }
    }

    /// Up to `limit` events after `position`, in log order, stopping before
    /// the total parameter bytes would pass `maxBytes` (but always returning
    /// at least one event when there is one).
    ///
    /// An event whose values will not open is set aside in the dead letters
    /// (``setAsideUndecryptable(_:now:)``) and the read goes on past it. A
    /// row past the log's head throws ``StorageError/damaged(path:reason:)``
    /// (``requireWithinHead(_:)``).
    package func readEvents(after position: Int64, limit: Int, maxBytes: Int = .max, now: Double) throws
        -> [StoredEvent]
    {
        while true {
            let (events, closed) = try withStatement(
                """
                SELECT \(StoredEvent.columns) \(StoredEvent.fromEvents) \
                WHERE e.seq > ? ORDER BY e.seq LIMIT ?
                """
            ) { statement in
                try statement.bind(position, at: 1)
                try statement.bind(limit, at: 2)
                var events: [StoredEvent] = []
                var closed: [Int64] = []
                var bytes = 0
                while try statement.step() {
                    try requireWithinHead(statement.int64(at: 0))
                    guard let event = StoredEvent(statement, on: self) else {
                        closed.append(statement.int64(at: 0))
                        continue
                    }
                    bytes += event.parametersJSON.utf8.count + event.name.utf8.count
                    if !events.isEmpty && bytes > maxBytes { break }
                    events.append(event)
                }
                return (events, closed)
            }
            try setAsideUndecryptable(closed, now: now)
            // A page of rows that all stayed closed: read the next one.
            guard events.isEmpty && !closed.isEmpty else { return events }
        }
    }

    /// How many events lie after `position`.
    package func countEvents(after position: Int64) throws -> Int {
        try withStatement("SELECT count(*) FROM events WHERE seq > ?") { statement in
            try statement.bind(position, at: 1)
            return try statement.step() ? statement.int(at: 0) : 0
        }
    }

    /// Moves `consumer` to `position` (never backwards) and deletes the prefix
    /// every consumer has finished, in one transaction.
    ///
    /// - Returns: the number of events deleted.
    @discardableResult
    package func advanceConsumer(_ consumer: String, to position: Int64) throws -> Int {
        try transaction { try advanceConsumerInTransaction(consumer, to: position) }
    }

    /// ``advanceConsumer(_:to:)`` for a caller that already holds a write
    /// transaction.
    @discardableResult
    package func advanceConsumerInTransaction(_ consumer: String, to position: Int64) throws -> Int {
        try withStatement(
            "UPDATE consumers SET position = max(position, ?), updated_at = ? WHERE id = ?"
        ) { statement in
            try statement.bind(position, at: 1)
            try statement.bind(clock.now, at: 2)
            try statement.bind(consumer, at: 3)
            try statement.step()
        }
        return try deleteFinishedPrefix()
    }

    /// Finished events are deleted in runs of at least this many, or all at
    /// once when every consumer has finished the whole log.
    ///
    /// Each delete rewrites the leftmost leaves, the pages above them and the
    /// freelist: deleting after every upload batch of 100 costs about a
    /// third of the drain with 16 KiB pages, in runs almost nothing
    /// (spool-bench's `drain` area). What waits is fewer than this many rows
    /// the views already show as finished (`pending_events` and
    /// `consumer_lag` go by positions).
    package static let finishedRunToDelete: Int64 = 1_024

    /// Deletes the events every consumer has finished, once there are
    /// ``finishedRunToDelete`` of them or the log is finished entirely. With
    /// no consumers, nothing is deleted.
    package func deleteFinishedPrefix() throws -> Int {
        let (finished, oldest, head) = try withStatement(
            "SELECT (SELECT min(position) FROM consumers), (SELECT min(seq) FROM events), (SELECT last_seq FROM log_head)"
        ) { statement -> (Int64?, Int64?, Int64) in
            _ = try statement.step()
            return (
                statement.isNull(at: 0) ? nil : statement.int64(at: 0),
                statement.isNull(at: 1) ? nil : statement.int64(at: 1),
                statement.isNull(at: 2) ? 0 : statement.int64(at: 2)
            )
        }
        guard let finished, let oldest, oldest <= finished else { return 0 }
        guard finished >= head || finished - oldest + 1 >= Self.finishedRunToDelete else { return 0 }
        return try withStatement("DELETE FROM events WHERE seq <= ?") { statement in
            try statement.bind(finished, at: 1)
            try statement.step()
            return changes
        }
    }

    /// How many events `consumer` lost to the retention bound.
    package func droppedCount(of consumer: String) throws -> Int {
        try withStatement("SELECT dropped FROM consumers WHERE id = ?") { statement in
            try statement.bind(consumer, at: 1)
            return try statement.step() ? statement.int(at: 0) : 0
        }
    }

    /// Drops not yet reported to `consumer`, marking them reported.
    package func takeUnreportedDrops(of consumer: String) throws -> Int {
        try transaction {
            let unreported = try withStatement("SELECT dropped - dropped_reported FROM consumers WHERE id = ?") {
                statement in
                try statement.bind(consumer, at: 1)
                return try statement.step() ? statement.int(at: 0) : 0
            }
            if unreported > 0 { try markDropsReported(of: consumer) }
            return unreported
        }
    }

    /// Marks every drop counted for `consumer` as reported.
    package func markDropsReported(of consumer: String) throws {
        try withStatement("UPDATE consumers SET dropped_reported = dropped WHERE id = ?") { statement in
            try statement.bind(consumer, at: 1)
            try statement.step()
        }
    }

    /// Removes a consumer's row, so it no longer holds events back.
    package func removeConsumer(_ consumer: String) throws {
        try transaction {
            try withStatement("DELETE FROM consumers WHERE id = ?") { statement in
                try statement.bind(consumer, at: 1)
                try statement.step()
            }
            _ = try deleteFinishedPrefix()
        }
    }
}

// MARK: - Async front

extension EventLog {
    package func registerConsumer(_ consumer: String, startingAt start: ConsumerStart) async throws
        -> Int64
    {
        try await database.run { try $0.registerConsumer(consumer, startingAt: start) }
    }

    package func readEvents(after position: Int64, limit: Int, maxBytes: Int = .max) async throws
        -> [StoredEvent]
    {
        let now = database.clock.now
        return try await database.run {
            try $0.readEvents(after: position, limit: limit, maxBytes: maxBytes, now: now)
        }
    }

    @discardableResult
    package func advanceConsumer(_ consumer: String, to position: Int64) async throws -> Int {
        try await database.run { try $0.advanceConsumer(consumer, to: position) }
    }

    package func countEvents(after position: Int64) async throws -> Int {
        try await database.run { try $0.countEvents(after: position) }
    }

    package func position(of consumer: String) async throws -> Int64? {
        try await database.run { try $0.position(of: consumer) }
    }
}
