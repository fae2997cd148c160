import Foundation

extension Connection {
    /// How many times `name` occurs in the history between `since` and
    /// `until` (inclusive), counting no further than `cap` (an EVENT_FREQUENCY
    /// rule only needs to know whether the count passes its N, so the index
    /// scan stops at N + 1).
    package func historyCount(of name: String, since: Double?, until: Double, cap: Int) throws -> Int {
        try withStatement(
            """
            SELECT count(*) FROM (SELECT 1 FROM event_history \
            WHERE name = ? AND recorded_at BETWEEN ? AND ? LIMIT ?)
            """
        ) { statement in
            try statement.bind(name, at: 1)
            try statement.bind(since ?? -Double.greatestFiniteMagnitude, at: 2)
            try statement.bind(until, at: 3)
            try statement.bind(cap, at: 4)
            return try statement.step() ? statement.int(at: 0) : 0
        }
    }

    /// Deletes history older than `before`; returns how many rows went.
    @discardableResult
    package func pruneHistory(before: Double) throws -> Int {
        try withStatement("DELETE FROM event_history WHERE recorded_at < ?") { statement in
            try statement.bind(before, at: 1)
            try statement.step()
            return changes
        }
    }
}
