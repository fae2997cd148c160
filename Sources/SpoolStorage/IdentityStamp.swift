import Foundation

/// One row of `identities`: who events were recorded for.
package struct IdentityRow: Sendable, Hashable {
    package let id: Int64
    package let anonymousID: String
    package let userID: String?
    /// The traits as a JSON object.
    package let traitsJSON: String
    /// Seconds since 1970.
    package let createdAt: Double

    package init(id: Int64, anonymousID: String, userID: String?, traitsJSON: String, createdAt: Double) {
        self.id = id
        self.anonymousID = anonymousID
        self.userID = userID
        self.traitsJSON = traitsJSON
        self.createdAt = createdAt
    }
}

/// The identity in force when an event was accepted, before or after it has
/// a row in `identities`.
///
/// A stamp is made on the caller's thread (`identify`, `reset`, before the
/// file is open) and gets its row on the database queue: when it is
/// persisted, or at the first commit of an event that carries it. Every event
/// carries a reference to the stamp in force, never a copy of its strings.
///
/// A stamp can be followed by a successor: another process's change this
/// process adopted, for the events recorded from the change's time on, or
/// what an erasure left, for every event.
package final class IdentityStamp: Sendable {
    package enum Origin: Sendable {
        /// Whatever identity the file holds when it is opened (a new
        /// anonymous id when it holds none).
        case file
        /// `base` with a new user, new traits (nil: the base's, as they are
        /// when its row is read: an alias), and a new anonymous id when
        /// `anonymousID` is set (a reset).
        case changed(base: IdentityStamp, userID: String?, traitsJSON: String?, anonymousID: String?)
        /// A row already in the file (another process's change, or the
        /// anonymous identity an erasure left).
        case row(IdentityRow)
    }

    /// The stamp events carrying this one take instead, from `since` on
    /// (seconds since 1970; `-infinity`: every event).
    package struct Successor: Sendable {
        package let stamp: IdentityStamp
        package var since: Double
    }

    package let origin: Origin
    /// When the change was made, in seconds since 1970: the order of changes
    /// on the file (`identities.created_at`).
    package let createdAt: Double
    /// How many erasures of the file this process had noticed when the stamp
    /// was made: a stamp of an earlier era never gets a row.
    package let era: Int
    private let resolved: Protected<IdentityRow?>
    private let next = Protected<Successor?>(nil)

    package init(_ origin: Origin, at createdAt: Double, era: Int = 0) {
        self.origin = origin
        self.createdAt = createdAt
        self.era = era
        if case .row(let row) = origin {
            resolved = Protected(row)
        } else {
            resolved = Protected(nil)
        }
    }

    /// Its row, once it has one.
    package var row: IdentityRow? { resolved.withLock { $0 } }

    /// Where it stands among the file's changes: when it was made; for the
    /// file's identity, when its row's change was made (before every change
    /// while it has none).
    package var order: Double {
        switch origin {
        case .changed: return createdAt
        case .row(let row): return row.createdAt
        case .file: return row?.createdAt ?? -.infinity
        }
    }

    /// The user id and traits (a JSON object) it stands for, known before
    /// it has a row except for the file's identity before the file is open.
    package var user: (id: String?, traitsJSON: String) {
        if let row { return (row.userID, row.traitsJSON) }
        if case .changed(let base, let userID, let traitsJSON, _) = origin {
            return (userID, traitsJSON ?? base.user.traitsJSON)
        }
        return (nil, "{}")
    }

    /// Its anonymous id, when it is known without writing a row: its own
    /// (a reset), its row's, or the one of the change it was made over.
    package var anonymousID: String? {
        if let row { return row.anonymousID }
        switch origin {
        case .changed(let base, _, _, let anonymousID): return anonymousID ?? base.anonymousID
        case .row(let row): return row.anonymousID
        case .file: return nil
        }
    }

    /// The first stamp of the chain of changes it was made over (the file's
    /// identity, another process's row, or what an erasure left).
    package var root: IdentityStamp {
        var stamp = self
        while case .changed(let base, _, _, _) = stamp.origin { stamp = base }
        return stamp
    }

    /// What events carrying it take instead, if anything.
    package var successor: Successor? { next.withLock { $0 } }

    /// Makes `stamp` the successor for events recorded from `since` on.
    package func succeed(by stamp: IdentityStamp, since: Double) {
        next.withLock { $0 = Successor(stamp: stamp, since: since) }
    }

    /// Applies the successor to every later event too, whatever its time:
    /// once one event took it, none after it goes back.
    package func successorApplied() {
        next.withLock { $0?.since = -.infinity }
    }

    /// Its row, written now if it has none yet, after the rows of the
    /// changes it was made over (so the file's identity is read before a
    /// later change of this process is written). On the database queue.
    ///
    /// Inside a transaction that then rolls back, the caller must
    /// ``forgetRow()`` for each stamp it had no row for: the rows named were
    /// never written.
    package func resolve(on connection: Connection) throws -> IdentityRow {
        if let row { return row }
        // Iteratively: many changes may be waiting for their rows.
        var chain = [self]
        while case .changed(let base, _, _, _) = chain[chain.count - 1].origin, base.row == nil {
            chain.append(base)
        }
        var row: IdentityRow!
        for stamp in chain.reversed() {
            row = try stamp.write(on: connection)
        }
        return row
    }

    /// Its row, written now, its base's row being known.
    private func write(on connection: Connection) throws -> IdentityRow {
        let row: IdentityRow
        switch origin {
        case .row(let existing):
            row = existing
        case .file:
            row =
                try connection.identityInForce()
                ?? connection.insertIdentity(
                    anonymousID: UUID().uuidString.lowercased(), userID: nil, traitsJSON: "{}", createdAt: createdAt)
        case .changed(let base, let userID, let traitsJSON, let anonymousID):
            var baseRow = try base.resolve(on: connection)
            // A change another process made after this one's base and before
            // this one (a reset, an identify there) comes first: this one is
            // made over it, as the changes were made in that order.
            if let newer = try connection.identityInForce(), newer.id != baseRow.id,
                newer.createdAt > baseRow.createdAt, newer.createdAt <= createdAt
            {
                baseRow = newer
            }
            row = try connection.insertIdentity(
                anonymousID: anonymousID ?? baseRow.anonymousID, userID: userID,
                traitsJSON: traitsJSON ?? baseRow.traitsJSON, createdAt: createdAt)
        }
        resolved.withLock { $0 = row }
        return row
    }

    /// Forgets a row written in a transaction that rolled back; the file's
    /// identity and another process's keep theirs (they were read, not
    /// written).
    package func forgetRow() {
        switch origin {
        case .changed, .file: resolved.withLock { $0 = nil }
        case .row: break
        }
    }
}

/// The context in force when an event was accepted (app, device, os, locale,
/// custom values) as a JSON object, before or after it has a row in
/// `contexts`. Rows are shared by content: setting the same context at every
/// launch adds no row.
package final class ContextStamp: Sendable {
    package let json: String
    package let createdAt: Double
    /// Its row's id, and the file's erasure count when it was found.
    private let rowID = Protected<(id: Int64, erasures: Int64)?>(nil)

    package init(json: String, at createdAt: Double) {
        self.json = json
        self.createdAt = createdAt
    }

    /// Its row's id, found or written now: again after an erasure deleted
    /// it (`erasures`, the file's count, differs). On the database queue.
    package func resolve(on connection: Connection, erasures: Int64) throws -> Int64 {
        if let row = rowID.withLock({ $0 }), row.erasures == erasures { return row.id }
        let id = try connection.contextRow(json: json, createdAt: createdAt)
        rowID.withLock { $0 = (id, erasures) }
        return id
    }

    /// Forgets a row found or written in a transaction that rolled back.
    package func forgetRow() { rowID.withLock { $0 = nil } }

    /// Whether it has its row in the file as it is after `erasures` erasures.
    package func hasRow(erasures: Int64) -> Bool { rowID.withLock { $0?.erasures == erasures } }
}

/// The identity and context in force, as one object every event accepted
/// until either changes refers to.
package final class RecordStamps: Sendable {
    package let identity: IdentityStamp
    package let context: ContextStamp?

    package init(identity: IdentityStamp, context: ContextStamp?) {
        self.identity = identity
        self.context = context
    }
}

/// The type and target of a message other than a `track`, and the
/// property values the history keeps for an event a survey filters on.
final class MessageFields: Sendable {
    let type: String
    let target: String?
    let historyValues: HistoryValues?

    init(type: String, target: String?, historyValues: HistoryValues? = nil) {
        self.type = type
        self.target = target
        self.historyValues = historyValues
    }
}

// MARK: - Rows

extension Connection {
    /// The identity in force on this file: the latest change, by when it was
    /// made (`created_at`), the highest id breaking a tie.
    ///
    /// One whose user id and traits will not open (sealed with a key the
    /// provider does not return) is reported, and replaced by a row with its
    /// anonymous id alone, sealed with the current key: events recorded
    /// from now on are not stamped with a row that cannot be read.
    package func identityInForce() throws -> IdentityRow? {
        guard let (row, opened) = try identity("ORDER BY created_at DESC, id DESC") else { return nil }
        if opened { return row }
        return try insertIdentity(
            anonymousID: row.anonymousID, userID: nil, traitsJSON: "{}", createdAt: row.createdAt)
    }

    /// The first row written since the last erasure: the anonymous identity
    /// the erasure left (ids are never reused, so the lowest is the oldest).
    package func identityLeftByErasure() throws -> IdentityRow? {
        try identity("ORDER BY id")?.row
    }

    /// The row first in `order`, its user id and traits opened. One that
    /// will not open reads as its anonymous id alone (`opened` false), and
    /// is reported.
    private func identity(_ order: StaticString) throws -> (row: IdentityRow, opened: Bool)? {
        try withStatement(
            "SELECT id, anonymous_id, user_id, traits, created_at, sealed FROM identities \(order) LIMIT 1"
        ) { statement in
            guard try statement.step() else { return nil }
            let id = statement.int64(at: 0)
            var person = (userID: statement.optionalString(at: 2), traitsJSON: statement.string(at: 3))
            var opened = true
            if let sealed = statement.blob(at: 5) {
                if let open = openIdentity(sealed, row: id) {
                    person = open
                } else {
                    (person, opened) = ((nil, "{}"), false)
                    reportUndecryptable(1)
                }
            }
            let row = IdentityRow(
                id: id, anonymousID: statement.string(at: 1), userID: person.userID, traitsJSON: person.traitsJSON,
                createdAt: statement.double(at: 4))
            return (row, opened)
        }
    }

    /// What tells whether another process changed the identity or erased
    /// the file since the last look: the highest `identities` id (0 when
    /// there is none) and the file's erasure count.
    package func identityWatermark() throws -> (newestID: Int64, erasures: Int64) {
        try withStatement(
            "SELECT (SELECT coalesce(max(id), 0) FROM identities), erasures FROM log_head WHERE id = 1"
        ) { statement in
            guard try statement.step() else { return (0, 0) }
            return (statement.int64(at: 0), statement.int64(at: 1))
        }
    }

    /// Writes an identity row; with a sealer, its user id and traits are
    /// sealed for the row's id (a second statement, once the id is known).
    package func insertIdentity(anonymousID: String, userID: String?, traitsJSON: String, createdAt: Double) throws
        -> IdentityRow
    {
        try transaction {
            try withStatement(
                "INSERT INTO identities (anonymous_id, user_id, traits, created_at) VALUES (?, ?, ?, ?)"
            ) { statement in
                try statement.bind(anonymousID, at: 1)
                try statement.bind(sealer == nil ? userID : nil, at: 2)
                try statement.bind(sealer == nil ? traitsJSON : Self.sealedJSON, at: 3)
                try statement.bind(createdAt, at: 4)
                try statement.step()
            }
            let id = lastInsertRowID
            if let sealed = try sealIdentity(userID: userID, traitsJSON: traitsJSON, row: id) {
                try seal(sealed, table: .identities, row: id)
            }
            return IdentityRow(
                id: id, anonymousID: anonymousID, userID: userID, traitsJSON: traitsJSON, createdAt: createdAt)
        }
    }

    /// The id of the `contexts` row holding `json`, inserted if none does.
    /// With a sealer, only the newest row is compared (opened), and a new
    /// one is sealed for its id.
    package func contextRow(json: String, createdAt: Double) throws -> Int64 {
        if let sealing {
            let newest = try withStatement("SELECT id, sealed FROM contexts ORDER BY id DESC LIMIT 1") {
                statement -> Int64? in
                guard try statement.step(), let sealed = statement.blob(at: 1) else { return nil }
                let id = statement.int64(at: 0)
                let opened = sealing.open(sealed, for: .context(id))
                return opened.map { $0.elementsEqual(json.utf8) } == true ? id : nil
            }
            if let newest { return newest }
        } else {
            let existing = try withStatement("SELECT id FROM contexts WHERE context = ? ORDER BY id DESC LIMIT 1") {
                statement -> Int64? in
                try statement.bind(json, at: 1)
                return try statement.step() ? statement.int64(at: 0) : nil
            }
            if let existing { return existing }
        }
        return try transaction {
            try withStatement("INSERT INTO contexts (context, created_at) VALUES (?, ?)") { statement in
                try statement.bind(sealer == nil ? json : Self.sealedJSON, at: 1)
                try statement.bind(createdAt, at: 2)
                try statement.step()
            }
            let id = lastInsertRowID
            if let sealing {
                let sealed = try withUTF8Bytes(of: json) {
                    Array(try sealing.seal(UnsafeRawBufferPointer($0), for: .context(id)))
                }
                try seal(sealed, table: .contexts, row: id)
            }
            return id
        }
    }
}
