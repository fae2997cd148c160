import SpoolStorage

/// When a condition is evaluated, and so which occurrences count.
package enum EvaluationTime: Sendable {
    /// Now: every occurrence committed so far.
    case now(Double)
    /// At a committed event: occurrences up to and including it. The
    /// history counts by millisecond, and its row for the event's
    /// millisecond may already count later occurrences too, so that
    /// millisecond's occurrences up to the event come from delivery:
    /// `sameMillisecond[name]`.
    case event(at: Double, sameMillisecond: [String: Int])

    var seconds: Double {
        switch self {
        case .now(let seconds), .event(let seconds, _): seconds
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
                    of: frequency.eventName, since: since, end: .through(now), cap: cap)
            case .event(let at, let sameMillisecond):
                let before = try connection.historyCount(
                    of: frequency.eventName, since: since, end: .beforeMillisecondOf(at), cap: cap)
                occurrences = min(cap, before + sameMillisecond[frequency.eventName, default: 0])
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

    /// The event names the condition counts.
    var countedEventNames: Set<String> {
        switch self {
        case .eventFrequency(let frequency): [frequency.eventName]
        case .all(let conditions), .any(let conditions):
            conditions.reduce(into: []) { $0.formUnion($1.countedEventNames) }
        }
    }
}
