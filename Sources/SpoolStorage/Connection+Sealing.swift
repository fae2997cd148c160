import Foundation

/// Sealing and opening the personal values of rows with the connection's
/// ``SealingSession`` (see the `sealed` columns in docs/SCHEMA.md).
extension Connection {
    /// What a readable column holds when its value is sealed: JSON `null`.
    package static let sealedJSON = "null"
    /// ``sealedJSON`` as static bytes, which the writer binds without a copy.
    package static let sealedJSONBytes: StaticString = "null"

    /// An event's parameters (`json`) and target sealed for the event
    /// `eventID` as one value (``SealedEventValue``), or nil without a
    /// sealer. Where it is stored, `parameters` holds JSON `null` and
    /// `target` NULL.
    package func sealEvent(_ json: String, target: String?, eventID: String) throws -> [UInt8]? {
        guard let sealing else { return nil }
        return try withUTF8Bytes(of: json) { json in
            try withUTF8Bytes(of: eventID) { id in
                let event = SealedRow.event(UnsafeRawBufferPointer(id))
                guard let target else { return Array(try sealing.seal(UnsafeRawBufferPointer(json), for: event)) }
                let plain = SealedEventValue.joining(target: target, parameters: UnsafeRawBufferPointer(json))
                return try plain.withUnsafeBytes { Array(try sealing.seal($0, for: event)) }
            }
        }
    }

    /// The parameters and target of the event `eventID`: `readable` and
    /// `readableTarget` when `sealed` is nil, else opened from `sealed`.
    /// Nil when it will not open.
    package func openEvent(
        readable: String, target readableTarget: String?, sealed: UnsafeRawBufferPointer?, eventID: String
    )
        -> (parametersJSON: String, target: String?)?
    {
        guard let sealed else { return (readable, readableTarget) }
        guard let sealing,
            let plain = withUTF8Bytes(of: eventID, { sealing.open(sealed, for: .event(UnsafeRawBufferPointer($0))) })
        else { return nil }
        return plain.withUnsafeBytes { plain in
            guard let parts = SealedEventValue.split(plain) else { return nil }
            let target = parts.target.map { String(decoding: plain[$0], as: UTF8.self) }
            return (String(decoding: plain[parts.parameters], as: UTF8.self), target ?? readableTarget)
        }
    }

    // MARK: - Identities

    /// An identity's user id and traits, as one sealed value: a byte that
    /// says whether there is a user id, its length (4 bytes, big-endian) and
    /// bytes, then the traits' JSON.
    package func sealIdentity(userID: String?, traitsJSON: String, row: Int64) throws -> [UInt8]? {
        guard let sealing else { return nil }
        var plain: [UInt8] = [userID == nil ? 0 : 1]
        let user = Array((userID ?? "").utf8)
        withUnsafeBytes(of: UInt32(user.count).bigEndian) { plain.append(contentsOf: $0) }
        plain.append(contentsOf: user)
        plain.append(contentsOf: traitsJSON.utf8)
        return try plain.withUnsafeBytes { Array(try sealing.seal($0, for: .identity(row))) }
    }

    /// The user id and traits of the `identities` row `row` sealed in
    /// `sealed`; nil when it will not open.
    package func openIdentity(_ sealed: UnsafeRawBufferPointer, row: Int64) -> (userID: String?, traitsJSON: String)? {
        guard let plain = sealing?.open(sealed, for: .identity(row)), plain.count >= 5 else { return nil }
        let count = plain[1..<5].reduce(0) { $0 << 8 | Int($1) }
        guard plain.count >= 5 + count else { return nil }
        let user = plain[0] == 0 ? nil : String(decoding: plain[5..<(5 + count)], as: UTF8.self)
        return (user, String(decoding: plain[(5 + count)...], as: UTF8.self))
    }

    /// The tables whose rows are sealed once their id is known.
    package enum SealedTable {
        case identities, contexts
    }

    /// Stores `sealed` as the `sealed` value of row `row` of `table`.
    package func seal(_ sealed: [UInt8], table: SealedTable, row: Int64) throws {
        let sql =
            switch table {
            case .identities: "UPDATE identities SET sealed = ? WHERE id = ?"
            case .contexts: "UPDATE contexts SET sealed = ? WHERE id = ?"
            }
        try withStatement(sql) { statement in
            try statement.bindBlob(sealed, at: 1)
            try statement.bind(row, at: 2)
            try statement.step()
        }
    }

    // MARK: - Rows that will not open

    /// Moves the events at `positions` to the dead letters with reason
    /// `undecryptable`, as they are (still sealed), and deletes them from
    /// the log, in one transaction: a value that will not open is neither
    /// sent nor dropped. ``ConnectionOptions/onUndecryptable`` hears how many moved, and the
    /// collector, through ``LossCause/deadLettered``, how many the uploader
    /// had not sent.
    package func setAsideUndecryptable(_ positions: [Int64], now: Double) throws {
        guard !positions.isEmpty else { return }
        var moved = 0
        try transaction {
            try withStatement(
                """
                INSERT OR REPLACE INTO dead_letters \
                (seq, id, name, parameters, recorded_at, session_id, status, reason, failed_at, type, target, \
                identity_id, context_id, sealed) \
                SELECT seq, id, name, parameters, recorded_at, session_id, NULL, ?, ?, type, target, \
                identity_id, context_id, sealed FROM events WHERE seq = ?
                """
            ) { copy in
                try copy.bind(Self.undecryptableReason, at: 1)
                try copy.bind(now, at: 2)
                for position in positions {
                    try copy.bind(position, at: 3)
                    try copy.step()
                    moved += changes
                    copy.resetKeepingBindings()
                }
            }
            try withStatement("DELETE FROM events WHERE seq = ?") { delete in
                for position in positions {
                    try delete.bind(position, at: 1)
                    try delete.step()
                    delete.resetKeepingBindings()
                }
            }
            // The ones the uploader had not sent are lost to the collector
            // until they are requeued.
            let uploader = try position(of: Self.uploaderConsumer) ?? 0
            try countLoss(.deadLettered, positions.count { $0 > uploader })
        }
        reportUndecryptable(moved)
    }

    /// The reason of a dead letter whose values would not open.
    package static let undecryptableReason = "undecryptable"

    // MARK: - Sealed rows without a sealer

    /// Notes that an engine with encryption opened the file.
    package func noteSealing(now: Double) throws {
        try withStatement("INSERT OR IGNORE INTO sealing (id, since) VALUES (1, ?)") { statement in
            try statement.bind(now, at: 1)
            try statement.step()
        }
    }

    /// Notes `id` as the key values are sealed with from now on, for every
    /// process using the file (``RowSealer/follow(_:now:)``).
    package func noteCurrentKey(_ id: String) throws {
        try withStatement("UPDATE sealing SET key_id = ?") { statement in
            try statement.bind(id, at: 1)
            try statement.step()
        }
    }

    /// A write transaction that may seal values. The sealer follows the key
    /// another process made current (``RowSealer/follow(_:now:)``) before the
    /// write lock is taken, so that a slow key provider holds up no other
    /// process's commit, and again inside it, where a key noted in between
    /// is seen (its provider then asked under the lock, as rarely as that).
    package func sealingTransaction<T>(_ body: () throws -> T) throws -> T {
        if !isInTransaction { try followNotedKey() }
        return try transaction {
            try followNotedKey()
            return try body()
        }
    }

    /// Lets the sealer follow the key noted in the file, once the file's
    /// schema notes keys.
    private func followNotedKey() throws {
        guard let sealer else { return }
        if !notesKeys {
            notesKeys = try scalarInt("SELECT count(*) FROM pragma_table_info('sealing') WHERE name = 'key_id'") > 0
            guard notesKeys else { return }
        }
        sealer.follow(try notedKeyID(), now: clock.now)
    }

    /// The key ``noteCurrentKey(_:)`` last noted, if any.
    package func notedKeyID() throws -> String? {
        try withStatement("SELECT key_id FROM sealing") { statement in
            try statement.step() ? statement.optionalString(at: 0) : nil
        }
    }

    /// Whether any row holds a sealed value. Looked for only when an engine
    /// with encryption ever opened the file; the note goes once none is left.
    package func holdsSealedRows() throws -> Bool {
        guard try scalarInt("SELECT count(*) FROM sealing") > 0 else { return false }
        let sealed = try scalarInt(
            """
            SELECT EXISTS (SELECT 1 FROM events WHERE sealed IS NOT NULL) \
            OR EXISTS (SELECT 1 FROM dead_letters WHERE sealed IS NOT NULL) \
            OR EXISTS (SELECT 1 FROM identities WHERE sealed IS NOT NULL) \
            OR EXISTS (SELECT 1 FROM contexts WHERE sealed IS NOT NULL)
            """)
        if sealed == 0 { try execute("DELETE FROM sealing") }
        return sealed != 0
    }
}
