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
package final class IdentityStamp: Sendable {
    package enum Origin: Sendable {
        /// Whatever identity the file holds when it is opened (a new
        /// anonymous id when it holds none).
        case file
        /// `base` with a new user and traits, and a new anonymous id when
        /// `anonymousID` is set (a reset).
        case changed(base: IdentityStamp, userID: String?, traitsJSON: String, anonymousID: String?)
        /// A row already in the file (another process's change).
        case row(IdentityRow)
    }

    package let origin: Origin
    /// When the change was made, in seconds since 1970.
    package let createdAt: Double
    private let resolved: Protected<IdentityRow?>

    package init(_ origin: Origin, at createdAt: Double) {
        self.origin = origin
        self.createdAt = createdAt
        if case .row(let row) = origin {
            resolved = Protected(row)
        } else {
            resolved = Protected(nil)
        }
    }

    /// Its row, once it has one.
    package var row: IdentityRow? { resolved.withLock { $0 } }

    /// The user id and traits (a JSON object) it stands for, known before
    /// it has a row except for the file's identity before the file is open.
    package var user: (id: String?, traitsJSON: String) {
        if let row { return (row.userID, row.traitsJSON) }
        if case .changed(_, let userID, let traitsJSON, _) = origin { return (userID, traitsJSON) }
        return (nil, "{}")
    }

    /// Its row, written now if it has none yet. On the database queue.
    ///
    /// Inside a transaction that then rolls back, the caller must
    /// ``forgetRow()``: the row it names was never written.
    package func resolve(on connection: Connection) throws -> IdentityRow {
        if let row { return row }
        let row: IdentityRow
        switch origin {
        case .row(let existing):
            row = existing
        case .file:
            row =
                try connection.newestIdentity()
                ?? connection.insertIdentity(
                    anonymousID: UUID().uuidString.lowercased(), userID: nil, traitsJSON: "{}", createdAt: createdAt)
        case .changed(let base, let userID, let traitsJSON, let anonymousID):
            let anonymousID = try anonymousID ?? base.resolve(on: connection).anonymousID
            row = try connection.insertIdentity(
                anonymousID: anonymousID, userID: userID, traitsJSON: traitsJSON, createdAt: createdAt)
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
    private let rowID = Protected<Int64?>(nil)

    package init(json: String, at createdAt: Double) {
        self.json = json
        self.createdAt = createdAt
    }

    /// Its row's id, found or written now. On the database queue.
    package func resolve(on connection: Connection) throws -> Int64 {
        if let id = rowID.withLock({ $0 }) { return id }
        let id = try connection.contextRow(json: json, createdAt: createdAt)
        rowID.withLock { $0 = id }
        return id
    }

    /// The same context, not yet written (after an erasure deleted its row).
    package func unwritten() -> ContextStamp { ContextStamp(json: json, at: createdAt) }

    /// Forgets a row found or written in a transaction that rolled back.
    package func forgetRow() { rowID.withLock { $0 = nil } }

    /// Whether it has its row.
    package var hasRow: Bool { rowID.withLock { $0 != nil } }
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

/// The type and target of a message other than a `track`.
final class MessageFields: Sendable {
    let type: String
    let target: String?

    init(type: String, target: String?) {
        self.type = type
        self.target = target
    }
}

// MARK: - Rows

extension Connection {
    /// The newest row of `identities`: the identity in force on this file.
    package func newestIdentity() throws -> IdentityRow? {
        try withStatement(
            "SELECT id, anonymous_id, user_id, traits, created_at FROM identities ORDER BY id DESC LIMIT 1"
        ) { statement in
            guard try statement.step() else { return nil }
            return IdentityRow(
                id: statement.int64(at: 0), anonymousID: statement.string(at: 1),
                userID: statement.optionalString(at: 2), traitsJSON: statement.string(at: 3),
                createdAt: statement.double(at: 4))
        }
    }

    /// The id of the newest row of `identities`, 0 when there is none.
    package func newestIdentityID() throws -> Int64 {
        try withStatement("SELECT coalesce(max(id), 0) FROM identities") { statement in
            try statement.step()
            return statement.int64(at: 0)
        }
    }

    package func insertIdentity(anonymousID: String, userID: String?, traitsJSON: String, createdAt: Double) throws
        -> IdentityRow
    {
        try withStatement(
            "INSERT INTO identities (anonymous_id, user_id, traits, created_at) VALUES (?, ?, ?, ?)"
        ) { statement in
            try statement.bind(anonymousID, at: 1)
            try statement.bind(userID, at: 2)
            try statement.bind(traitsJSON, at: 3)
            try statement.bind(createdAt, at: 4)
            try statement.step()
        }
        return IdentityRow(
            id: lastInsertRowID, anonymousID: anonymousID, userID: userID, traitsJSON: traitsJSON,
            createdAt: createdAt)
    }

    /// The id of the `contexts` row holding `json`, inserted if none does.
    package func contextRow(json: String, createdAt: Double) throws -> Int64 {
        let existing = try withStatement("SELECT id FROM contexts WHERE context = ? ORDER BY id DESC LIMIT 1") {
            statement -> Int64? in
            try statement.bind(json, at: 1)
            return try statement.step() ? statement.int64(at: 0) : nil
        }
        if let existing { return existing }
        try withStatement("INSERT INTO contexts (context, created_at) VALUES (?, ?)") { statement in
            try statement.bind(json, at: 1)
            try statement.bind(createdAt, at: 2)
            try statement.step()
        }
        return lastInsertRowID
    }
}
