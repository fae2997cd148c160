import Foundation

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
    /// The message type: track, screen, identify, group or alias.
    package let type: UnsafeRawBufferPointer
    /// A group's id, or an alias's previous id.
    package let target: UnsafeRawBufferPointer?
    /// Who it was recorded for; nil for events stored before identities were kept.
    package let anonymousID: UnsafeRawBufferPointer?
    package let userID: UnsafeRawBufferPointer?
    /// The identity's traits, a JSON object.
    package let traits: UnsafeRawBufferPointer?
    /// The context in force, a JSON object; nil when none was set.
    package let context: UnsafeRawBufferPointer?
    /// The launch that recorded it and when, in milliseconds of that
    /// launch's monotonic clock (see ``EventLog/Launch``); nil without one.
    package let launch: (id: Int64, milliseconds: Int64)?
}

extension Connection {
    /// Calls `body` with up to `limit` events after `position`, in log order,
    /// straight from SQLite's column bytes: upload batches are built by
    /// splicing these bytes, never by decoding and re-encoding them. Stops
    /// early when `body` returns false.
    ///
    /// With a sealer, rows are read in chunks whose sealed values are opened
    /// first (``OpenedEventRows``), with the sealer's keys as they are when
    /// the call starts. An event with a value that will not open is passed
    /// over and set aside in the dead letters
    /// (``setAsideUndecryptable(_:now:)``). A row past the log's head
    /// throws ``StorageError/damaged(path:reason:)`` (``requireWithinHead(_:)``).
    ///
    /// - Returns: how many events were set aside.
    @discardableResult
    package func forEachEventRow(
        after position: Int64, limit: Int, now: Double, _ body: (EventRowView) throws -> Bool
    ) throws -> Int {
        var closed: [Int64] = []
        try withStatement(EventPeople.sql) { statement in
            try statement.bind(position, at: 1)
            try statement.bind(limit, at: 2)
            if let sealing {
                var rows = OpenedEventRows(sealing)
                defer { rows.release() }
                try rows.forEach(in: statement, on: self, closed: &closed, body)
            } else {
                var rows = PlainEventRows()
                defer { rows.release() }
                try rows.forEach(in: statement, on: self, closed: &closed, body)
            }
        }
        try setAsideUndecryptable(closed, now: now)
        return closed.count
    }

    /// Throws ``StorageError/damaged(path:reason:)`` for a row at `seq`,
    /// read by a statement still stepping, that lies past the log's head. No
    /// commit wrote such a row: it is garbage on a damaged page that SQLite
    /// read as a cell. Taken as an event, it would move a consumer's
    /// position past every event yet to be recorded up to it.
    ///
    /// The head only grows, so a row at or below the highest head this
    /// connection has read is within it, and costs one comparison; above
    /// it, the head is read again, in the stepping statement's snapshot.
    func requireWithinHead(_ seq: Int64) throws {
        guard seq > headSeen else { return }
        headSeen = max(headSeen, try headPosition())
        guard seq > headSeen else { return }
        throw StorageError.damaged(path: path, reason: "a row at position \(seq), past the log's head \(headSeen)")
    }

    /// The launch that recorded the row `statement` (``EventPeople/sql``'s)
    /// stands on, and when.
    static func launch(_ statement: Statement) -> (id: Int64, milliseconds: Int64)? {
        statement.isNull(at: 11) || statement.isNull(at: 12) ? nil : (statement.int64(at: 11), statement.int64(at: 12))
    }
}
