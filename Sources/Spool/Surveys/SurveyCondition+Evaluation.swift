import SpoolStorage

/// When a condition is evaluated, and so which occurrences count.
package enum EvaluationTime {
    /// Now: every occurrence committed so far, recorded up to this time.
    case now(Double)
    /// At an event, inside its group's transaction: every occurrence the log
    /// held up to and including it. `count(name, since, cap)` counts the
    /// history through the end of the group (capped); it already holds the
    /// events after this one in the group, and `later(name, since)` says how
    /// many of those it counts for `name` from `since` on.
    case event(
        at: Double, later: (_ name: String, _ since: Double?) -> Int,
        count: (_ name: String, _ since: Double?, _ cap: Int) throws -> Int)

    var seconds: Double {
        switch self {
        case .now(let seconds), .event(let seconds, _, _): seconds
        }
    }
}

extension SurveyCondition {
    /// Whether the condition holds at `time` over the persisted history, as
    /// indexed counts that stop at N + 1.
    package func holds(at time: EvaluationTime, in connection: Connection) throws -> Bool {
        switch self {
        case .eventFrequency(let frequency):
            let since: Double? =
                switch frequency.window {
                case .ever: nil
                case .last(let seconds): time.seconds - seconds
                }
            let cap = min(frequency.count, Int.max - 1) + 1
            let occurrences: Int
            switch time {
            case .now(let now):
                occurrences = try connection.historyCount(
                    of: frequency.eventName, since: since, until: now, cap: cap)
            case .event(_, let later, let count):
                let after = later(frequency.eventName, since)
                let counted = try count(frequency.eventName, since, after > Int.max - cap ? Int.max : cap + after)
                occurrences = min(cap, max(0, counted - after))
            }
            return frequency.holds(for: occurrences)
        case .all(let conditions):
            for condition in conditions where try !condition.holds(at: time, in: connection) { return false }
            return true
        case .any(let conditions):
            for condition in conditions where try condition.holds(at: time, in: connection) { return true }
            return false
        }
    }
}
