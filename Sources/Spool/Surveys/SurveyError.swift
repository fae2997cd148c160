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
