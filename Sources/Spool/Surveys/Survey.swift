import Foundation

/// A survey the app can show, with the rules that make it a candidate.
public struct Survey: Sendable, Hashable {
    public let id: String
    /// The events that make this survey a candidate. `nil` is a wildcard: any
    /// event except the survey lifecycle events. An empty set is refused
    /// (``SurveyError/emptyTriggerList(surveyID:)``): it would never match,
    /// and is almost always a wildcard written by mistake.
    public let triggerEventNames: Set<String>?
    /// Stage-2 conditions a candidate must also meet (default: none).
    public let conditions: SurveyCondition

    public init(id: String, triggerEventNames: Set<String>? = nil, conditions: SurveyCondition = .always) {
        self.id = id
        self.triggerEventNames = triggerEventNames
        self.conditions = conditions
    }

    /// True when `eventName` makes this survey a trigger candidate (S2).
    public func isCandidate(for eventName: String) -> Bool {
        guard !SurveyLifecycleEvent.isLifecycle(eventName), eventName != EventEngine.heartbeatEventName else {
            return false
        }
        return triggerEventNames?.contains(eventName) ?? true
    }
}

/// A stage-2 rule over the user's persisted event history.
public indirect enum SurveyCondition: Sendable, Hashable {
    /// EVENT_FREQUENCY: how often an event occurred in a window.
    case eventFrequency(EventFrequency)
    /// Every condition holds (true when empty).
    case all([SurveyCondition])
    /// At least one condition holds (false when empty).
    case any([SurveyCondition])

    /// No condition: always holds.
    public static let always = SurveyCondition.all([])
}

/// "Event X occurred at least / at most / exactly N times in the last D
/// seconds (or ever)." Survey lifecycle events count like any other (S3).
public struct EventFrequency: Sendable, Hashable {
    public enum Comparison: Sendable, Hashable {
        case atLeast
        case atMost
        case exactly
    }

    public enum Window: Sendable, Hashable {
        case ever
        /// The last `seconds` seconds before the evaluation.
        case last(seconds: TimeInterval)

        /// The last `days` days.
        public static func days(_ days: Double) -> Window { .last(seconds: days * 86_400) }
    }

    public let eventName: String
    public let comparison: Comparison
    public let count: Int
    public let window: Window

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

/// A survey became a candidate and its conditions held.
public struct SurveyTrigger: Sendable, Hashable {
    public let surveyID: String
    /// The event that made it a candidate.
    public let event: RecordedEvent
}

/// Why a survey call was refused.
public enum SurveyError: Error, Sendable, Hashable, CustomStringConvertible {
    case unknownSurvey(String)
    case emptySurveyID
    case emptyTriggerList(surveyID: String)
    case invalidCondition(surveyID: String, reason: String)

    public var description: String {
        switch self {
        case .unknownSurvey(let id): return "No survey with id \(id.debugDescription) is registered"
        case .emptySurveyID: return "A survey id cannot be empty"
        case .emptyTriggerList(let id):
            return "Survey \(id.debugDescription) has an empty triggerEventNames; use nil for a wildcard survey"
        case .invalidCondition(let id, let reason):
            return "Survey \(id.debugDescription) has an invalid condition: \(reason)"
        }
    }
}

extension SurveyCondition {
    /// Checks counts and windows; throws the first problem found.
    func validate(surveyID: String) throws(SurveyError) {
        switch self {
        case .eventFrequency(let frequency):
            if frequency.eventName.isEmpty {
                throw .invalidCondition(surveyID: surveyID, reason: "EVENT_FREQUENCY needs an event name")
            }
            if frequency.count < 0 {
                throw .invalidCondition(surveyID: surveyID, reason: "negative count \(frequency.count)")
            }
            if case .last(let seconds) = frequency.window, !(seconds >= 0) || !seconds.isFinite {
                throw .invalidCondition(surveyID: surveyID, reason: "window of \(seconds) seconds")
            }
        case .all(let conditions), .any(let conditions):
            for condition in conditions { try condition.validate(surveyID: surveyID) }
        }
    }
}
