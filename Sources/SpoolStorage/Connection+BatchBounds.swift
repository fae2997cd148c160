import Foundation

extension Connection {
    /// Where the next batch after `position` ends: the last event of the
    /// unsettled batch read before from the same first event
    /// (`upload_batch_bounds`), or nil when there is none, and the position
    /// of that first event (nil when no event is after `position`).
    package func batchBound(after position: Int64) throws -> (first: Int64?, through: Int64?) {
        try withStatement(
            """
            SELECT f.seq, b.last_seq FROM (SELECT min(seq) AS seq FROM events WHERE seq > ?) AS f \
            LEFT JOIN upload_batch_bounds AS b ON b.first_seq = f.seq
            """
        ) { statement in
            try statement.bind(position, at: 1)
            guard try statement.step(), !statement.isNull(at: 0) else { return (nil, nil) }
            return (statement.int64(at: 0), statement.isNull(at: 1) ? nil : statement.int64(at: 1))
        }
    }

    /// Notes that the batch starting at `first` ends at `last`, unless a
    /// batch starting there was noted already.
    package func noteBatchBound(first: Int64, last: Int64) throws {
        try withStatement("INSERT OR IGNORE INTO upload_batch_bounds (first_seq, last_seq) VALUES (?, ?)") {
            try $0.bind(first, at: 1)
            try $0.bind(last, at: 2)
            try $0.step()
        }
    }

    /// Forgets the batches whose first event is at or before `position`:
    /// their events are settled, or gone.
    package func forgetBatchBounds(through position: Int64) throws {
        try withStatement("DELETE FROM upload_batch_bounds WHERE first_seq <= ?") {
            try $0.bind(position, at: 1)
            try $0.step()
        }
    }
}
