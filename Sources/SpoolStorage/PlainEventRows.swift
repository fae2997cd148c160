import Foundation

/// The identities and contexts of one ``Connection/forEachEventRow(after:limit:now:_:)``
/// call's events, read once each by row id (opened, with a sealing session)
/// and kept for the rest of the call.
///
/// An upload batch's events share one identity and one context, or a few:
/// joining them to every row had SQLite look both up again for each event.
struct EventPeople {
    /// What a row id found.
    enum Found<Values> {
        /// No such row (a LEFT JOIN's NULLs).
        case missing
        /// Sealed, and it will not open here (no sealer, or not with these keys).
        case unopened
        case values(Values)
    }

    /// Where an identity's values sit in ``kept``.
    struct Identity {
        var anonymousID: Range<Int>
        var userID: Range<Int>?
        var traits: Range<Int>
    }

    private let sealing: SealingSession?
    private var identities: [Int64: Found<Identity>] = [:]
    private var contexts: [Int64: Found<Range<Int>>] = [:]
    /// The identities' and contexts' values.
    private(set) var kept: ByteArena

    /// The query both readers step: each event's columns, with its identity
    /// and context ids (columns 8 and 9), its sealed value (10) and its
    /// launch (11 and 12, ``Connection/launch(_:)``).
    static let sql = """
        SELECT seq, id, name, recorded_at, session_id, parameters, type, target, identity_id, context_id, sealed, \
        launch, launch_ms FROM events WHERE seq > ? ORDER BY seq LIMIT ?
        """

    init(_ sealing: SealingSession?, keeping kept: ByteArena = ByteArena()) {
        self.sealing = sealing
        self.kept = kept
    }

    /// The bytes at `range` of ``kept``: valid until it next grows.
    subscript(range: Range<Int>) -> UnsafeRawBufferPointer { kept[range] }

    /// The identity of the row `statement` stands on (``sql``'s).
    mutating func identity(of statement: Statement, on connection: Connection) throws -> Found<Identity> {
        guard !statement.isNull(at: 8) else { return .missing }
        let id = statement.int64(at: 8)
        if let known = identities[id] { return known }
        let found = try connection.withStatement(
            "SELECT anonymous_id, user_id, traits, sealed FROM identities WHERE id = ?"
        ) { row -> Found<Identity> in
            try row.bind(id, at: 1)
            guard try row.step() else { return .missing }
            let anonymousID = kept.append(row.bytes(at: 0))
            guard let sealed = row.blob(at: 3) else {
                return .values(
                    Identity(
                        anonymousID: anonymousID, userID: row.optionalBytes(at: 1).map { kept.append($0) },
                        traits: kept.append(row.bytes(at: 2))))
            }
            guard sealing != nil, let person = connection.openIdentity(sealed, row: id) else { return .unopened }
            return .values(
                Identity(
                    anonymousID: anonymousID,
                    userID: person.userID.map { withUTF8Bytes(of: $0) { kept.append(UnsafeRawBufferPointer($0)) } },
                    traits: withUTF8Bytes(of: person.traitsJSON) { kept.append(UnsafeRawBufferPointer($0)) }))
        }
        identities[id] = found
        return found
    }

    /// The context of the row `statement` stands on (``sql``'s).
    mutating func context(of statement: Statement, on connection: Connection) throws -> Found<Range<Int>> {
        guard !statement.isNull(at: 9) else { return .missing }
        let id = statement.int64(at: 9)
        if let known = contexts[id] { return known }
        let found = try connection.withStatement("SELECT context, sealed FROM contexts WHERE id = ?") {
            row -> Found<Range<Int>> in
            try row.bind(id, at: 1)
            guard try row.step() else { return .missing }
            guard let sealed = row.blob(at: 1) else { return .values(kept.append(row.bytes(at: 0))) }
            guard let json = sealing?.open(sealed, for: .context(id)) else { return .unopened }
            return .values(json.withUnsafeBytes { kept.append($0) })
        }
        contexts[id] = found
        return found
    }
}

/// The rows of one ``Connection/forEachEventRow(after:limit:now:_:)`` on a
/// connection without a sealer: each event's columns straight from SQLite.
struct PlainEventRows {
    private var people = EventPeople(nil)

    func release() { people.kept.deallocate() }

    /// Steps `statement` (``EventPeople/sql``'s), handing `body` each row
    /// that holds no sealed value and appending to `closed` the positions of
    /// those that do.
    mutating func forEach(
        in statement: Statement, on connection: Connection, closed: inout [Int64], _ body: (EventRowView) throws -> Bool
    ) throws {
        while try statement.step() {
            let seq = statement.int64(at: 0)
            try connection.requireWithinHead(seq)
            let identity = try people.identity(of: statement, on: connection)
            let context = try people.context(of: statement, on: connection)
            var person: EventPeople.Identity?
            var json: Range<Int>?
            switch (identity, context) {
            case (.unopened, _), (_, .unopened):
                closed.append(seq)  // sealed, and no sealer to open it
                continue
            default:
                if case .values(let values) = identity { person = values }
                if case .values(let range) = context { json = range }
            }
            guard statement.isNull(at: 10) else {
                closed.append(seq)
                continue
            }
            // Built after both lookups: the kept values do not move while `body` runs.
            let row = EventRowView(
                seq: seq, id: statement.bytes(at: 1), name: statement.bytes(at: 2),
                recordedAt: statement.double(at: 3), session: statement.optionalBytes(at: 4),
                parameters: statement.bytes(at: 5), type: statement.bytes(at: 6),
                target: statement.optionalBytes(at: 7), anonymousID: person.map { people[$0.anonymousID] },
                userID: person?.userID.map { people[$0] }, traits: person.map { people[$0.traits] },
                context: json.map { people[$0] }, launch: Connection.launch(statement))
            guard try body(row) else { return }
        }
    }
}
