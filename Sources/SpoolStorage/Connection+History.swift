import Foundation

extension Connection {
    /// How many times `name` occurs in the history from the millisecond of
    /// `since` (nil: ever) up to `until` (nil: everything committed),
    /// counting no further than `cap` (an EVENT_FREQUENCY rule only needs
    /// to know whether the count passes its N, so the index scan stops after
    /// N + 1 rows: each counts at least one occurrence).
    package func historyCount(of name: String, since: Double?, until: Double?, cap: Int) throws -> Int {
        let total = try withStatement(
            """
            SELECT coalesce(sum(occurrences), 0) FROM (SELECT occurrences FROM event_history \
            WHERE name = ? AND recorded_at BETWEEN ? AND ? LIMIT ?)
            """
        ) { statement in
            try statement.bind(name, at: 1)
            try statement.bind(since.map(HistoryMillisecond.of) ?? -Double.greatestFiniteMagnitude, at: 2)
            try statement.bind(until ?? Double.greatestFiniteMagnitude, at: 3)
            try statement.bind(cap, at: 4)
            return try statement.step() ? statement.int(at: 0) : 0
        }
        return min(total, cap)
    }

    /// Deletes the oldest history rows, and the oldest property values
    /// kept with them: those recorded before `cutoff`, and beyond the newest
    /// `maximumRows` of `event_history` (`maximumValueRows` of
    /// `event_history_values`; nil: `maximumRows`). Rows are appended in
    /// commit order, so both are a prefix by id: the cost is proportional to
    /// what is deleted, never to the size of the history.
    ///
    /// - Returns: how many rows went, from both tables.
    @discardableResult
    package func pruneHistory(
        before cutoff: Double?, keepingAtMost maximumRows: Int?, values maximumValueRows: Int? = nil
    )
        throws -> Int
    {
        try prunePrefix(of: "event_history", before: cutoff, keepingAtMost: maximumRows)
            + prunePrefix(of: "event_history_values", before: cutoff, keepingAtMost: maximumValueRows ?? maximumRows)
    }

    /// Deletes the prefix by id of `table` (one of the history's own tables,
    /// named by this file) that is older than `cutoff` or beyond the newest
    /// `maximumRows`.
    private func prunePrefix(of table: String, before cutoff: Double?, keepingAtMost maximumRows: Int?) throws -> Int {
        var deleted = 0
        if let maximumRows {
            deleted += try withStatement(
                "DELETE FROM \(table) WHERE id <= (SELECT max(id) FROM \(table)) - ?"
            ) { statement in
                try statement.bind(max(0, maximumRows), at: 1)
                try statement.step()
                return changes
            }
        }
        if let cutoff {
            // The first row young enough, walking up from the oldest.
            let firstKept = try withStatement(
                "SELECT id FROM \(table) WHERE recorded_at >= ? ORDER BY id LIMIT 1"
            ) { statement -> Int64? in
                try statement.bind(cutoff, at: 1)
                return try statement.step() ? statement.int64(at: 0) : nil
            }
            deleted += try withStatement(
                firstKept == nil ? "DELETE FROM \(table)" : "DELETE FROM \(table) WHERE id < ?"
            ) { statement in
                if let firstKept { try statement.bind(firstKept, at: 1) }
                try statement.step()
                return changes
            }
        }
        return deleted
    }

    /// How many rows the history holds (each counts one name's occurrences
    /// in one millisecond), from its ids (O(1): only prefixes are ever
    /// deleted).
    package func historyRowCount() throws -> Int {
        try withStatement("SELECT max(id) - min(id) + 1 FROM event_history") { statement in
            try statement.step() && !statement.isNull(at: 0) ? statement.int(at: 0) : 0
        }
    }
}
