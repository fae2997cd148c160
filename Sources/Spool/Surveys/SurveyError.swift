/// Why a survey call was refused. Nothing was registered or recorded.
public enum SurveyError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A lifecycle event was marked for a survey id that is not registered.
    case unknownSurvey(String)
    /// The survey's id is empty.
    case emptySurveyID
    /// `triggerEventNames` is an empty set, which would never match; use
    /// `nil` for a survey that any event can trigger.
    case emptyTriggerList(surveyID: String)
    /// A condition has an empty event name, a negative count, or a negative
    /// or non-finite window; `reason` says which.
    case invalidCondition(surveyID: String, reason: String)

    /// A sentence naming the survey and the problem.
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
