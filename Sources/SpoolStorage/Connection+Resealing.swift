import Foundation

/// Sealing every value again with the current key (key rotation), and
/// sealing the values written before encryption was turned on.
extension Connection {
    /// The tables whose values are sealed.
    package enum ResealedTable: CaseIterable, Sendable {
        case events, deadLetters, identities, contexts

        /// The rows after a row id, in order: row id, the row's binding
        /// (an event's id), its readable values (an event's target and
        /// parameters, an identity's user id and traits), and its sealed
        /// value.
        var select: String {
            switch self {
            case .events:
                "SELECT seq, id, target, parameters, sealed FROM events WHERE seq > ? ORDER BY seq LIMIT ?"
            case .deadLetters:
                "SELECT seq, id, target, parameters, sealed FROM dead_letters WHERE seq > ? ORDER BY seq LIMIT ?"
            case .identities:
                "SELECT id, NULL, user_id, traits, sealed FROM identities WHERE id > ? ORDER BY id LIMIT ?"
            case .contexts:
                "SELECT id, NULL, NULL, context, sealed FROM contexts WHERE id > ? ORDER BY id LIMIT ?"
            }
        }

        /// An event's rows whose target is readable beside a sealed value,
        /// in `select`'s columns.
        var selectReadableTargets: String? {
            switch self {
            case .events:
                "SELECT seq, id, target, parameters, sealed FROM events WHERE target IS NOT NULL AND sealed IS NOT NULL"
            case .deadLetters:
                """
                SELECT seq, id, target, parameters, sealed FROM dead_letters \
                WHERE target IS NOT NULL AND sealed IS NOT NULL
                """
            case .identities, .contexts: nil
            }
        }

        /// Whether the sealed row `select` stands on has nothing readable
        /// that its sealed value should hold. An event whose `target` is not
        /// NULL beside a sealed value is sealed again, its target with it.
        func sealsWholeRow(_ statement: Statement) -> Bool {
            switch self {
            case .events, .deadLetters: statement.isNull(at: 2)
            case .identities, .contexts: true
            }
        }

        var update: String {
            switch self {
            case .events: "UPDATE events SET parameters = 'null', target = NULL, sealed = ? WHERE seq = ?"
            case .deadLetters: "UPDATE dead_letters SET parameters = 'null', target = NULL, sealed = ? WHERE seq = ?"
            case .identities: "UPDATE identities SET user_id = NULL, traits = 'null', sealed = ? WHERE id = ?"
            case .contexts: "UPDATE contexts SET context = 'null', sealed = ? WHERE id = ?"
            }
        }
    }

    /// What one ``resealChunk(_:after:limit:now:)`` did.
    package struct ResealedChunk: Sendable {
        /// The last row id looked at; nil when no row was left.
        package var last: Int64?
        package var resealed = 0
        /// Rows whose value would not open: events are set aside in the
        /// dead letters, other rows stay as they are.
        package var undecryptable = 0
    }

    /// Seals again, with the current key, up to `limit` values of `table`
    /// after row id `after` that are readable or sealed with another key;
    /// in one transaction, with SQLite's secure delete on, so the bytes
    /// they replace are overwritten in the file.
    package func resealChunk(_ table: ResealedTable, after: Int64, limit: Int, now: Double) throws -> ResealedChunk {
        guard let sealer, let current = sealer.currentKeyID else { return ResealedChunk() }
        try execute("PRAGMA secure_delete = ON")
        defer { try? execute(Self.routineSecureDelete) }  // try?: left on, deletes only cost more; nothing is lost
        return try transaction {
            var chunk = ResealedChunk()
            var sealed: [(row: Int64, value: [UInt8])] = []
            var closed: [Int64] = []
            try withStatement(table.select) { statement in
                try statement.bind(after, at: 1)
                try statement.bind(limit, at: 2)
                while try statement.step() {
                    let row = statement.int64(at: 0)
                    chunk.last = row
                    let old = statement.blob(at: 4)
                    // Sealed with the current key, nothing readable beside it.
                    if let old, RowSealer.keyID(of: old) == current, table.sealsWholeRow(statement) { continue }
                    guard let value = try reseal(table, statement, row: row, old: old) else {
                        closed.append(row)
                        continue
                    }
                    sealed.append((row, value))
                }
            }
            try store(sealed, in: table)
            chunk.resealed = sealed.count
            chunk.undecryptable = closed.count
            if table == .events {
                try setAsideUndecryptable(closed, now: now)
            } else {
                reportUndecryptable(closed.count)
            }
            return chunk
        }
    }

    /// Notes (`sealed_targets_pending`) when a row holds its target readable
    /// beside a sealed value (sealed before migration 0016, copied by a
    /// salvage): the next start with encryption seals it.
    package func notePendingTargets() throws {
        try execute(
            """
            INSERT OR IGNORE INTO sealed_targets_pending (id) \
            SELECT 1 WHERE EXISTS (SELECT 1 FROM events WHERE target IS NOT NULL AND sealed IS NOT NULL) \
            OR EXISTS (SELECT 1 FROM dead_letters WHERE target IS NOT NULL AND sealed IS NOT NULL)
            """)
    }

    /// Seals each target still readable beside a sealed value with the
    /// value's parameters, when migration 0016 noted that some may be
    /// (`sealed_targets_pending`), in one transaction with SQLite's secure
    /// delete on; then deletes the note. A value that will not open keeps
    /// its target: its event is set aside, still sealed, when it is read.
    ///
    /// - Returns: how many targets were sealed.
    @discardableResult
    package func sealPendingTargets() throws -> Int {
        guard sealer?.currentKeyID != nil, try scalarInt("SELECT count(*) FROM sealed_targets_pending") > 0 else {
            return 0
        }
        try execute("PRAGMA secure_delete = ON")
        defer { try? execute(Self.routineSecureDelete) }  // try?: left on, deletes only cost more; nothing is lost
        return try transaction {
            var count = 0
            for table in ResealedTable.allCases {
                guard let select = table.selectReadableTargets else { continue }
                var sealed: [(row: Int64, value: [UInt8])] = []
                try withStatement(select) { statement in
                    while try statement.step() {
                        let row = statement.int64(at: 0)
                        if let value = try reseal(table, statement, row: row, old: statement.blob(at: 4)) {
                            sealed.append((row, value))
                        }
                    }
                }
                try store(sealed, in: table)
                count += sealed.count
            }
            try execute("DELETE FROM sealed_targets_pending")
            return count
        }
    }

    /// Writes each row's value sealed again (``ResealedTable/update``).
    private func store(_ sealed: [(row: Int64, value: [UInt8])], in table: ResealedTable) throws {
        try withStatement(table.update) { update in
            for (row, value) in sealed {
                try update.bindBlob(value, at: 1)
                try update.bind(row, at: 2)
                try update.step()
                update.resetKeepingBindings()
            }
        }
    }

    /// The value of the row `statement` stands on, sealed with the current
    /// key; nil when its old sealed value will not open.
    private func reseal(_ table: ResealedTable, _ statement: Statement, row: Int64, old: UnsafeRawBufferPointer?)
        throws -> [UInt8]?
    {
        guard let sealing else { return nil }
        switch table {
        case .events, .deadLetters:
            let id = statement.string(at: 1)
            guard
                let event = openEvent(
                    readable: statement.string(at: 3), target: statement.optionalString(at: 2), sealed: old,
                    eventID: id)
            else { return nil }
            return try sealEvent(event.parametersJSON, target: event.target, eventID: id)
        case .identities:
            var person = (userID: statement.optionalString(at: 2), traitsJSON: statement.string(at: 3))
            if let old {
                guard let opened = openIdentity(old, row: row) else { return nil }
                person = opened
            }
            return try sealIdentity(userID: person.userID, traitsJSON: person.traitsJSON, row: row)
        case .contexts:
            let json: [UInt8]
            if let old {
                guard let opened = sealing.open(old, for: .context(row)) else { return nil }
                json = opened
            } else {
                json = Array(statement.bytes(at: 3))
            }
            return try json.withUnsafeBytes { Array(try sealing.seal($0, for: .context(row))) }
        }
    }
}
