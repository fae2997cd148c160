import CSQLite

// MARK: - Property values kept for survey filters

extension Connection {
    /// Adds ?5 occurrences of the name ?1 with the value ?3 of its property
    /// ?2 to the millisecond ?4.
    static let addHistoryValueSQL = """
        INSERT INTO event_history_values (name, property, value, recorded_at, occurrences) VALUES (?, ?, ?, ?, ?) \
        ON CONFLICT (name, property, value, recorded_at) DO UPDATE SET occurrences = occurrences + excluded.occurrences
        """

    /// How many occurrences of `name` had `value` for `property`, from the
    /// millisecond of `since` (nil: ever) up to `until` (nil: everything
    /// committed), counting no further than `cap` (one index range; the scan
    /// stops after `cap` rows).
    package func historyValueCount(
        of name: String, property: String, equalTo value: HistoryValue, since: Double?, until: Double?, cap: Int
    ) throws -> Int {
        let total = try withStatement(
            """
            SELECT coalesce(sum(occurrences), 0) FROM (SELECT occurrences FROM event_history_values \
            WHERE name = ? AND property = ? AND value = ? AND recorded_at BETWEEN ? AND ? LIMIT ?)
            """
        ) { statement in
            try statement.bind(name, at: 1)
            try statement.bind(property, at: 2)
            try value.bind(to: statement, at: 3)
            try statement.bind(since.map(HistoryMillisecond.of) ?? -Double.greatestFiniteMagnitude, at: 4)
            try statement.bind(until ?? Double.greatestFiniteMagnitude, at: 5)
            try statement.bind(max(0, cap), at: 6)
            return try statement.step() ? statement.int(at: 0) : 0
        }
        return min(total, cap)
    }

    /// Where a walk over the distinct values of one property starts.
    package enum ValueBound: Sendable {
        /// The smallest value kept.
        case first
        /// The smallest value above this one.
        case above(HistoryValue)
        /// The smallest value equal to or above this one.
        case from(HistoryValue)
    }

    /// The smallest distinct value kept for `property` of `name` past
    /// `bound`, in SQLite's order (numbers by value, then text by its
    /// bytes): one index seek, so a filter walks only the values there are,
    /// however many occurrences each has.
    package func nextHistoryValue(of name: String, property: String, past bound: ValueBound) throws -> HistoryValue? {
        let sql =
            switch bound {
            case .first:
                "SELECT value FROM event_history_values WHERE name = ? AND property = ? ORDER BY value LIMIT 1"
            case .above:
                """
                SELECT value FROM event_history_values WHERE name = ? AND property = ? AND value > ? \
                ORDER BY value LIMIT 1
                """
            case .from:
                """
                SELECT value FROM event_history_values WHERE name = ? AND property = ? AND value >= ? \
                ORDER BY value LIMIT 1
                """
            }
        return try withStatement(sql) { statement in
            try statement.bind(name, at: 1)
            try statement.bind(property, at: 2)
            switch bound {
            case .first: break
            case .above(let value), .from(let value): try value.bind(to: statement, at: 3)
            }
            guard try statement.step() else { return nil }
            switch sqlite3_column_type(statement.handle, 0) {
            case SQLITE_INTEGER: return .integer(statement.int64(at: 0))
            case SQLITE_FLOAT: return .real(statement.double(at: 0))
            default: return .text(statement.string(at: 0))
            }
        }
    }

    /// How many rows `event_history_values` holds, from its ids (O(1): only
    /// prefixes are ever deleted).
    package func historyValueRowCount() throws -> Int {
        try withStatement("SELECT max(id) - min(id) + 1 FROM event_history_values") { statement in
            try statement.step() && !statement.isNull(at: 0) ? statement.int(at: 0) : 0
        }
    }

    // MARK: - Occurrences in time order

    /// The milliseconds in which `name` occurred between the milliseconds of
    /// `from` and `to` (nil: unbounded), with how many occurrences each,
    /// the latest first (or the earliest first), at most `limit` of them:
    /// one index range, read from the end a rule asks for.
    package func historyMilliseconds(
        of name: String, from: Double?, to: Double?, latestFirst: Bool, limit: Int
    ) throws -> [(millisecond: Double, occurrences: Int)] {
        let sql =
            latestFirst
            ? """
            SELECT recorded_at, occurrences FROM event_history WHERE name = ? AND recorded_at BETWEEN ? AND ? \
            ORDER BY recorded_at DESC LIMIT ?
            """
            : """
            SELECT recorded_at, occurrences FROM event_history WHERE name = ? AND recorded_at BETWEEN ? AND ? \
            ORDER BY recorded_at LIMIT ?
            """
        return try withStatement(sql) { statement in
            try statement.bind(name, at: 1)
            try statement.bind(from.map(HistoryMillisecond.of) ?? -Double.greatestFiniteMagnitude, at: 2)
            try statement.bind(to ?? Double.greatestFiniteMagnitude, at: 3)
            try statement.bind(max(1, limit), at: 4)
            var rows: [(millisecond: Double, occurrences: Int)] = []
            while try statement.step() { rows.append((statement.double(at: 0), statement.int(at: 1))) }
            return rows
        }
    }
}
