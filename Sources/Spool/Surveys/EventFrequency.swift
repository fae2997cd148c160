import Foundation

/// "Event X occurred at least / at most / exactly N times in the last D
/// seconds (or ever)."
///
/// Counted over the user's persisted event history, which survives restarts
/// and upload (kept for ``EngineConfiguration/historyRetention``, at most
/// ``EngineConfiguration/maximumHistoryRows`` rows, each counting one name's
/// occurrences in one millisecond). At an event, the count runs up to and
/// including that event, in log order; a window's far end is measured to
/// the millisecond. Survey
/// lifecycle events count like any other event; `flush_event` is never in
/// the history.
///
/// ```swift
/// EventFrequency("purchase", .atLeast, 3, in: .days(30))
/// ```
public struct EventFrequency: Sendable, Hashable {
    /// How the number of occurrences compares with ``EventFrequency/count``.
    public enum Comparison: Sendable, Hashable {
        /// `count` or more occurrences.
        case atLeast
        /// `count` or fewer occurrences (zero included).
        case atMost
        /// Exactly `count` occurrences.
        case exactly
    }

    /// The stretch of history that is counted.
    public enum Window: Sendable, Hashable {
        /// Everything the history keeps.
        case ever
        /// The last `seconds` seconds before the evaluation.
        case last(seconds: TimeInterval)

        /// The last `days` days.
        public static func days(_ days: Double) -> Window { .last(seconds: days * 86_400) }
    }

    /// The event name whose occurrences are counted.
    public let eventName: String
    /// How the occurrences compare with ``count``.
    public let comparison: Comparison
    /// The number of occurrences compared against; must not be negative.
    public let count: Int
    /// The stretch of history counted.
    public let window: Window

    /// A condition on how often `eventName` occurred in `window`.
    ///
    /// Checked when the survey is registered: an empty name, a negative count
    /// or a negative window makes ``SurveyCenter/register(_:)`` throw
    /// ``SurveyError/invalidCondition(surveyID:reason:)``.
    public init(_ eventName: String, _ comparison: Comparison, _ count: Int, in window: Window = .ever) {
        self.eventName = eventName
        self.comparison = comparison
        self.count = count
        self.window = window
    }

    /// True when `occurrences` satisfies the comparison.
    func holds(for occurrences: Int) -> Bool {
        switch comparison {
        case .atLeast: return occurrences >= count
        case .atMost: return occurrences <= count
        case .exactly: return occurrences == count
        }
    }
}
