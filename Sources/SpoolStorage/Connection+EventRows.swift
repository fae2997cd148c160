/// One stored event's columns, as SQLite holds them: the bytes of the text
/// columns without a copy. Valid only inside the closure that receives it.
package struct EventRowView {
    package let seq: Int64
    /// The event id's UTF-8 bytes.
    package let id: UnsafeRawBufferPointer
    package let name: UnsafeRawBufferPointer
    /// Seconds since 1970.
    package let recordedAt: Double
    /// nil for an event recorded outside a session.
    package let session: UnsafeRawBufferPointer?
    /// The parameters' canonical JSON (an object), as stored.
    package let parameters: UnsafeRawBufferPointer
}

extension Connection {
    /// Calls `body` with up to `limit` events after `position`, in log order,
    /// straight from SQLite's column bytes: upload batches are built by
    /// splicing these bytes, never by decoding and re-encoding them. Stops
    /// early when `body` returns false.
    package func forEachEventRow(
        after position: Int64, limit: Int, _ body: (EventRowView) throws -> Bool
    ) throws {
        try withStatement(
            """
            SELECT seq, id, name, recorded_at, session_id, parameters \
            FROM events WHERE seq > ? ORDER BY seq LIMIT ?
            """
        ) { statement in
            try statement.bind(position, at: 1)
            try statement.bind(limit, at: 2)
            while try statement.step() {
                let row = EventRowView(
                    seq: statement.int64(at: 0), id: statement.bytes(at: 1), name: statement.bytes(at: 2),
                    recordedAt: statement.double(at: 3),
                    session: statement.isNull(at: 4) ? nil : statement.bytes(at: 4),
                    parameters: statement.bytes(at: 5))
                guard try body(row) else { return }
            }
        }
    }
}
