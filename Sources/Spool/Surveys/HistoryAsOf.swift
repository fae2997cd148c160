import SpoolStorage

/// The history as it stood at one evaluation, and who the user was then:
/// what survey conditions read, on the database queue.
///
/// At *now* it is everything committed: counts take every occurrence, also
/// those stamped later than now by a clock since set back, as the rules
/// evaluated at those events counted them. At an event it is
/// read inside the event's commit transaction: the history through the end
/// of the event's group, less the group's occurrences after the event
/// (``LaterOccurrences``), so a rule sees the log up to and including its
/// event, in log order.
///
/// Bounds are milliseconds, as the history keeps them: a lower bound is
/// rounded down to its millisecond by the queries; an upper bound is
/// compared as given.
struct HistoryAsOf {
    let connection: Connection
    /// The evaluation's time, in seconds since 1970.
    let time: Double
    /// The session of the evaluation (nil: none running), and where its
    /// start is read, once it is asked for.
    private let session: (id: String?, starts: SessionStarts)
    let identity: EvaluationIdentity
    /// The group's shared counts, the occurrences after the event, and the
    /// event's own occurrence (name and millisecond, if it entered the
    /// history); nil at now.
    private let group: (counts: GroupHistoryCounts, later: LaterOccurrences, own: (String, Double)?)?

    /// The history at `time`, everything committed, in the session `sessionID`.
    static func now(_ time: Double, sessionID: String?, identity: EvaluationIdentity, in connection: Connection)
        -> HistoryAsOf
    {
        HistoryAsOf(
            connection: connection, time: time, session: (sessionID, SessionStarts()), identity: identity, group: nil)
    }

    /// The history at `event`, inside its group's transaction; `later`
    /// holds the group's events after it.
    static func event(
        _ event: StoredEvent, sessions: SessionStarts, identity: EvaluationIdentity, counts: GroupHistoryCounts,
        later: LaterOccurrences, in connection: Connection
    ) -> HistoryAsOf {
        let own = LaterOccurrences.entersHistory(event) ? (event.name, HistoryMillisecond.of(event.recordedAt)) : nil
        return HistoryAsOf(
            connection: connection, time: event.recordedAt, session: (event.sessionID, sessions), identity: identity,
            group: (counts, later, own))
    }

    /// When the session of the evaluation began (nil: no session running).
    var sessionStart: Double? { session.starts.start(of: session.id) }

    /// Where a window starts at this evaluation.
    enum Start: Equatable {
        case ever
        case from(Double)
        /// An empty window: `thisSession` with no session running.
        case none
    }

    func start(of window: EventFrequency.Window) -> Start {
        switch window {
        case .ever: .ever
        case .last(let seconds): .from(time - seconds)
        case .thisSession: sessionStart.map(Start.from) ?? .none
        }
    }

    // MARK: - Counts

    /// How many occurrences of `name` (passing `filter`) from `since` (nil:
    /// ever) up to the evaluation, counting no further than `cap`.
    func count(of name: String, where filter: PropertyFilter?, since: Double?, cap: Int) throws -> Int {
        guard let group else {
            return try Self.count(of: name, where: filter, since: since, until: nil, cap: cap, in: connection)
        }
        if let settled = group.counts.settled(cap, of: name, where: filter, since: since) { return settled }
        let after = group.later.count(of: name, where: filter, since: since)
        // The same window at the group's earliest event starts here or before.
        let widest = since.map { $0 - max(0, time - group.counts.earliest) }
        let counted = try group.counts.count(
            of: name, where: filter, since: since, widest: widest, cap: after > Int.max - cap ? Int.max : cap + after)
        return min(cap, max(0, counted - after))
    }

    /// Whether `name` occurred in the milliseconds from `from` through `to`.
    func occurred(_ name: String, from: Double, to: Double) throws -> Bool {
        guard let group else {
            return try connection.historyCount(of: name, since: from, until: min(to, time), cap: 1) > 0
        }
        let after = group.later.count(of: name, from: from, to: to)
        return try connection.historyCount(of: name, since: from, until: to, cap: after + 1) > after
    }

    /// Counts in the history through `until` (nil: everything committed):
    /// by name, or through the values kept for `filter`'s property.
    static func count(
        of name: String, where filter: PropertyFilter?, since: Double?, until: Double?, cap: Int,
        in connection: Connection
    ) throws -> Int {
        guard let filter else { return try connection.historyCount(of: name, since: since, until: until, cap: cap) }
        let property = filter.property
        if case .equals(let operand) = filter.match, let value = operand.historyValue {
            return try connection.historyValueCount(
                of: name, property: property, equalTo: value, since: since, until: until, cap: cap)
        }
        // Every other test walks the distinct values kept, one index seek
        // each, from where the test can first pass, and counts those that
        // pass: the cost follows the number of values, not of occurrences.
        var bound: Connection.ValueBound =
            switch filter.match {
            case .greaterThan(let number): .above(.real(number))
            case .contains: .from(.text(""))
            default: .first
            }
        var total = 0
        while total < cap, let value = try connection.nextHistoryValue(of: name, property: property, past: bound) {
            switch filter.match {
            case .greaterThan, .lessThan:
                // Past the numbers (text sorts after them), or past the bound.
                if case .text = value { return min(total, cap) }
                if case .lessThan(let limit) = filter.match, !value.isLess(than: limit) { return min(total, cap) }
            default: break
            }
            if filter.match.matches(value) {
                total += try connection.historyValueCount(
                    of: name, property: property, equalTo: value, since: since, until: until, cap: cap - total)
            }
            bound = .above(value)
        }
        return min(total, cap)
    }

    // MARK: - Occurrences in time order

    /// The millisecond of the latest occurrence of `name` at or before
    /// `time` (nil: none); `excludingTheEvent` leaves out the event
    /// evaluated at, so that a rule on the event's own name reads the one
    /// before.
    func latest(_ name: String, atOrBefore bound: Double, excludingTheEvent: Bool = false) throws -> Double? {
        try find(name, from: nil, to: min(bound, time + Self.halfMillisecond), latestFirst: true, excludingTheEvent)
    }

    /// The millisecond of the earliest occurrence of `name` from `from`
    /// through `to` (nil: none).
    func earliest(_ name: String, from: Double, to: Double) throws -> Double? {
        try find(name, from: from, to: to, latestFirst: false, false)
    }

    /// Half a millisecond: added to a millisecond to make it an inclusive
    /// upper bound, or a lower bound that rounds down to it.
    static let halfMillisecond = 0.0005

    private func find(_ name: String, from: Double?, to: Double, latestFirst: Bool, _ excludingTheEvent: Bool)
        throws -> Double?
    {
        guard let group else {
            return try connection.historyMilliseconds(of: name, from: from, to: to, latestFirst: latestFirst, limit: 1)
                .first?.millisecond
        }
        let theEvent = excludingTheEvent && group.own?.0 == name ? group.own?.1 : nil
        // Rows whose occurrences all come after the event in its group are
        // skipped; a few at most.
        var limit = 4
        while true {
            let rows = try connection.historyMilliseconds(
                of: name, from: from, to: to, latestFirst: latestFirst, limit: limit)
            for row in rows {
                let after = group.later.count(
                    of: name, from: row.millisecond + Self.halfMillisecond,
                    to: row.millisecond + Self.halfMillisecond)
                if row.occurrences > after + (row.millisecond == theEvent ? 1 : 0) { return row.millisecond }
            }
            guard rows.count == limit else { return nil }
            limit *= 4
        }
    }
}

/// When sessions began, from their ids (the engine makes a session's UUIDv7
/// id from its first event's time), read once per id in a group.
final class SessionStarts {
    private var last: (id: String, start: Double?)?

    func start(of id: String?) -> Double? {
        guard let id else { return nil }
        if let last, last.id == id { return last.start }
        let start = EventID.milliseconds(of: id).map { Double($0) / 1000 }
        last = (id, start)
        return start
    }
}

/// Who the user is at an evaluation, from the engine's identity in memory:
/// the anonymous id sampling hashes, and the traits, read once.
final class EvaluationIdentity {
    let anonymousID: String?
    private let traitsJSON: String
    private var parsed: [String: EventValue]?

    init(anonymousID: String?, traitsJSON: String) {
        self.anonymousID = anonymousID
        self.traitsJSON = traitsJSON
    }

    var traits: [String: EventValue] {
        if let parsed { return parsed }
        let traits: [String: EventValue]
        do {
            traits = try JSONReader.parseObject(traitsJSON)
        } catch {
            // Spool encoded them, so they read back; traits another program
            // wrote unreadably match no trait condition, and stay as they are.
            traits = [:]
        }
        parsed = traits
        return traits
    }
}
