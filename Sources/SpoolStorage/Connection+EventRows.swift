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
    /// Sealed values are opened first (an identity's and a context's once
    /// per call). An event with a value that will not open is passed over
    /// and set aside in the dead letters (``setAsideUndecryptable(_:now:)``).
    package func forEachEventRow(
        after position: Int64, limit: Int, now: Double, _ body: (EventRowView) throws -> Bool
    ) throws {
        var closed: [Int64] = []
        var sealedRows = SealedRowCache()
        try withStatement(
            """
            SELECT e.seq, e.id, e.name, e.recorded_at, e.session_id, e.parameters, e.type, e.target, \
            i.anonymous_id, i.user_id, i.traits, c.context, e.identity_id, e.context_id, e.sealed, i.sealed, c.sealed, \
            e.launch, e.launch_ms \
            FROM events AS e LEFT JOIN identities AS i ON i.id = e.identity_id \
            LEFT JOIN contexts AS c ON c.id = e.context_id \
            WHERE e.seq > ? ORDER BY e.seq LIMIT ?
            """
        ) { statement in
            try statement.bind(position, at: 1)
            try statement.bind(limit, at: 2)
            while try statement.step() {
                let row = EventRowView(
                    seq: statement.int64(at: 0), id: statement.bytes(at: 1), name: statement.bytes(at: 2),
                    recordedAt: statement.double(at: 3),
                    session: statement.isNull(at: 4) ? nil : statement.bytes(at: 4),
                    parameters: statement.bytes(at: 5), type: statement.bytes(at: 6),
                    target: statement.optionalBytes(at: 7), anonymousID: statement.optionalBytes(at: 8),
                    userID: statement.optionalBytes(at: 9), traits: statement.optionalBytes(at: 10),
                    context: statement.optionalBytes(at: 11),
                    launch: statement.isNull(at: 17) || statement.isNull(at: 18)
                        ? nil : (statement.int64(at: 17), statement.int64(at: 18)))
                let sealed = (statement.blob(at: 14), statement.blob(at: 15), statement.blob(at: 16))
                if sealed.0 == nil && sealed.1 == nil && sealed.2 == nil {
                    guard try body(row) else { return }
                    continue
                }
                guard
                    let opened = sealedRows.open(
                        row, sealed: sealed, identity: statement.int64(at: 12), context: statement.int64(at: 13),
                        on: self)
                else {
                    closed.append(row.seq)
                    continue
                }
                guard try opened.with(row, body) else { return }
            }
        }
        try setAsideUndecryptable(closed, now: now)
    }
}

/// The opened values of one row, and the identities and contexts opened
/// for one ``Connection/forEachEventRow(after:limit:now:_:)``.
private struct SealedRowCache {
    struct Opened {
        var parameters: ArraySlice<UInt8>?
        var identity: (userID: [UInt8]?, traits: [UInt8])?
        var context: [UInt8]?

        /// Calls `body` with `row`, its sealed values replaced by these.
        func with(_ row: EventRowView, _ body: (EventRowView) throws -> Bool) rethrows -> Bool {
            try Self.bytes(parameters, or: row.parameters) { parameters in
                try Self.bytes(identity?.userID, or: identity == nil ? row.userID : nil) { userID in
                    try Self.bytes(identity?.traits, or: row.traits) { traits in
                        try Self.bytes(context, or: row.context) { context in
                            try body(
                                EventRowView(
                                    seq: row.seq, id: row.id, name: row.name, recordedAt: row.recordedAt,
                                    session: row.session, parameters: parameters ?? row.parameters, type: row.type,
                                    target: row.target, anonymousID: row.anonymousID, userID: userID,
                                    traits: traits, context: context, launch: row.launch))
                        }
                    }
                }
            }
        }

        private static func bytes<Bytes: ContiguousBytes, T>(
            _ bytes: Bytes?, or readable: UnsafeRawBufferPointer?, _ body: (UnsafeRawBufferPointer?) throws -> T
        ) rethrows -> T {
            guard let bytes else { return try body(readable) }
            return try bytes.withUnsafeBytes { try body($0) }
        }
    }

    private var identities: [Int64: (userID: [UInt8]?, traits: [UInt8])?] = [:]
    private var contexts: [Int64: [UInt8]?] = [:]
    private var scratch: [UInt8] = []

    /// `row`'s sealed values (parameters, identity, context) opened; nil
    /// when one will not open.
    mutating func open(
        _ row: EventRowView, sealed: (UnsafeRawBufferPointer?, UnsafeRawBufferPointer?, UnsafeRawBufferPointer?),
        identity: Int64, context: Int64, on connection: Connection
    ) -> Opened? {
        var opened = Opened()
        if let parameters = sealed.0 {
            // Into the same buffer row after row (the previous row's values
            // are gone by now): no allocation per row.
            let needed = RowSealer.plaintextCount(of: parameters)
            if scratch.count < needed { scratch = [UInt8](repeating: 0, count: max(needed, 2 * scratch.count)) }
            guard let sealer = connection.sealer,
                let count = scratch.withUnsafeMutableBytes({ sealer.open(parameters, for: .event(row.id), into: $0) })
            else { return nil }
            opened.parameters = scratch[..<count]
        }
        if let sealedIdentity = sealed.1 {
            if identities[identity] == nil {
                identities[identity] = .some(
                    connection.openIdentity(sealedIdentity, row: identity).map {
                        ($0.userID.map { Array($0.utf8) }, Array($0.traitsJSON.utf8))
                    })
            }
            guard let person = identities[identity] ?? nil else { return nil }
            opened.identity = person
        }
        if let sealedContext = sealed.2 {
            if contexts[context] == nil {
                contexts[context] = .some(connection.sealer?.open(sealedContext, for: .context(context)))
            }
            guard let json = contexts[context] ?? nil else { return nil }
            opened.context = json
        }
        return opened
    }
}
