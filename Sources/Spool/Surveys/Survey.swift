import Foundation
import SpoolStorage

/// A survey the app can show, with the rules that make it a candidate.
///
/// Matching has two stages. An event is a *trigger candidate* for the survey
/// when its name is in ``triggerEventNames`` (any name for a wildcard
/// survey), except the survey lifecycle events and `flush_event`. Then the
/// ``conditions`` are evaluated over the user's event history as it stood
/// at the event (up to and including it, in log order); when they hold,
/// ``SurveyCenter`` reports a
/// ``SurveyTrigger``. Spool does not show surveys: your trigger callback does.
public struct Survey: Sendable, Hashable {
    /// The survey's id: non-empty and unique among registered surveys. It is
    /// the `survey_id` parameter of its lifecycle events.
    public let id: String
    /// The events that make this survey a candidate. `nil` is a wildcard: any
    /// event except the survey lifecycle events. An empty set is refused
    /// (``SpoolError/SurveyProblem/emptyTriggerList(surveyID:)``): it would never match,
    /// and is almost always a wildcard written by mistake.
    public let triggerEventNames: Set<String>?
    /// Stage-2 conditions a candidate must also meet (default: none).
    public let conditions: SurveyCondition
    /// The event properties this survey's filters read: event name →
    /// parameter keys. While the survey is registered, the history keeps
    /// these values of every recorded event (and only these), so a
    /// ``PropertyFilter`` sees the values recorded from its registration on,
    /// not before. A filter on a property not declared here is refused.
    public let historyProperties: [String: Set<String>]

    /// A survey; validated when registered with ``SurveyCenter/register(_:)``.
    public init(
        id: String, triggerEventNames: Set<String>? = nil, conditions: SurveyCondition = .always,
        historyProperties: [String: Set<String>] = [:]
    ) {
        self.id = id
        self.triggerEventNames = triggerEventNames
        self.conditions = conditions
        self.historyProperties = historyProperties
    }

    /// True when `eventName` makes this survey a trigger candidate (before
    /// its conditions are checked). Never true for the survey lifecycle
    /// events or `flush_event`, so a wildcard survey is not re-triggered by
    /// its own `survey_dismissed`.
    func isCandidate(for eventName: String) -> Bool {
        // By bytes, as the history counts the name.
        Self.mayTrigger(eventName)
            && (triggerEventNames.map { names in names.contains { Bytewise.same($0, eventName) } } ?? true)
    }

    /// False for the events that never trigger a survey: the survey
    /// lifecycle events and `flush_event`.
    static func mayTrigger(_ eventName: String) -> Bool {
        !SurveyLifecycleEvent.isLifecycle(eventName) && eventName != ReservedEventName.heartbeat
    }
}
