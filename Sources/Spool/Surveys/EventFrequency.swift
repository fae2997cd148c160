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
/// With a ``PropertyFilter``, only the occurrences whose property passes it
/// count (the survey declares the property in ``Survey/historyProperties``).
///
/// ```swift
/// EventFrequency("purchase", .atLeast, 3, in: .days(30))
/// EventFrequency("purchase", .atLeast, 3, in: .days(30), where: .property("amount", .greaterThan(50)))
/// EventFrequency("settings_opened", .atLeast, 2, in: .thisSession)
/// ```
public struct EventFrequency: Sendable, Hashable {
    /// How the number of occurrences compares with the rule's `count`.
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
        /// Since the current session began (at an event: the event's
        /// session), to the millisecond: its first event, which may have
        /// waited for the session in memory. With no session running,
        /// nothing.
        case thisSession

        /// The last `days` days.
        public static func days(_ days: Double) -> Window { .last(seconds: days * 86_400) }
        /// The last `hours` hours.
        public static func hours(_ hours: Double) -> Window { .last(seconds: hours * 3_600) }
        /// The last `minutes` minutes.
        public static func minutes(_ minutes: Double) -> Window { .last(seconds: minutes * 60) }
    }

    /// The event name whose occurrences are counted.
    let eventName: String
    /// How the occurrences compare with `count`.
    let comparison: Comparison
    /// The number of occurrences compared against; must not be negative.
    let count: Int
    /// The stretch of history counted.
    let window: Window
    /// Which occurrences count: those whose property passes the filter (nil:
    /// every occurrence).
    let filter: PropertyFilter?

    /// A condition on how often `eventName` occurred in `window`, counting
    /// only the occurrences that pass `filter` when one is given.
    ///
    /// Checked when the survey is registered: an empty name, a negative count
    /// or a negative window makes ``SurveyCenter/register(_:)`` throw
    /// ``SpoolError/SurveyProblem/invalidCondition(surveyID:reason:)``; a filter on a
    /// property the survey does not declare,
    /// ``SpoolError/SurveyProblem/undeclaredProperty(surveyID:eventName:property:)``; a
    /// NaN to compare with, ``SpoolError/SurveyProblem/nanComparisonValue(surveyID:name:)``.
    public init(
        _ eventName: String, _ comparison: Comparison, _ count: Int, in window: Window = .ever,
        where filter: PropertyFilter? = nil
    ) {
        self.eventName = eventName
        self.comparison = comparison
        self.count = count
        self.window = window
        self.filter = filter
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
