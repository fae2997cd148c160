import SpoolStorage

extension SurveyCondition {
    /// Whether the condition holds at `now` over the persisted history (what
    /// was recorded up to `now`), as indexed counts that stop at N + 1.
    package func holds(at now: Double, in connection: Connection) throws -> Bool {
        switch self {
        case .eventFrequency(let frequency):
            let since: Double? =
                switch frequency.window {
                case .ever: nil
                case .last(let seconds): now - seconds
                }
            let occurrences = try connection.historyCount(
                of: frequency.eventName, since: since, until: now, cap: min(frequency.count, Int.max - 1) + 1)
            return frequency.holds(for: occurrences)
        case .all(let conditions):
            for condition in conditions where try !condition.holds(at: now, in: connection) { return false }
            return true
        case .any(let conditions):
            for condition in conditions where try condition.holds(at: now, in: connection) { return true }
            return false
        }
    }
}
