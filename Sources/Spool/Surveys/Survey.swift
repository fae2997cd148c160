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
        guard !SurveyLifecycleEvent.isLifecycle(eventName), eventName != ReservedEventName.heartbeat else {
            return false
        }
        return triggerEventNames?.contains(eventName) ?? true
    }
}
