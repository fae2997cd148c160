extension SpoolError {
    /// Why a survey was refused (``SpoolError/invalidSurvey(_:)``). Nothing was
    /// registered or recorded.
    public enum SurveyProblem: Sendable, Hashable, CustomStringConvertible {
        /// The survey's id is empty.
        case emptySurveyID
        /// `triggerEventNames` is an empty set, which would never match; use
        /// `nil` for a survey that any event can trigger.
        case emptyTriggerList(surveyID: String)
        /// A condition has an empty event, property or trait name, a negative
        /// count, a negative or non-finite window or time, or compares with a
        /// null, an array or an object; `reason` says which.
        case invalidCondition(surveyID: String, reason: String)
        /// A ``PropertyFilter`` reads a property the survey does not declare in
        /// ``Survey/historyProperties``: the history would keep no value for it.
        case undeclaredProperty(surveyID: String, eventName: String, property: String)
        /// An ``EventSequence``'s gap is `.ever`, or its absence's window is not
        /// `.last(seconds:)`: a sequence needs a window.
        case sequenceWithoutWindow(surveyID: String)
        /// ``SurveyCondition/sampled(percent:)`` with a percentage outside 0
        /// through 100 (or NaN).
        case samplingOutOfRange(surveyID: String, percent: Double)
        /// A property filter or trait condition compares `name` with NaN, which
        /// nothing equals or orders against.
        case nanComparisonValue(surveyID: String, name: String)

        /// A sentence naming the survey and the problem.
        public var description: String {
            switch self {
            case .emptySurveyID: return "A survey id cannot be empty"
            case .emptyTriggerList(let id):
                return "Survey \(id.debugDescription) has an empty triggerEventNames; use nil for a wildcard survey"
            case .invalidCondition(let id, let reason):
                return "Survey \(id.debugDescription) has an invalid condition: \(reason)"
            case .undeclaredProperty(let id, let name, let property):
                return
                    "Survey \(id.debugDescription) filters on \(property.debugDescription) of \(name.debugDescription), "
                    + "which it does not declare: add it to historyProperties[\(name.debugDescription)]"
            case .sequenceWithoutWindow(let id):
                return "Survey \(id.debugDescription) has a sequence without a window: give its gap, and its absence, "
                    + "a .last(seconds:) window"
            case .samplingOutOfRange(let id, let percent):
                return "Survey \(id.debugDescription) samples \(percent) percent of users; use 0 through 100"
            case .nanComparisonValue(let id, let name):
                return "Survey \(id.debugDescription) compares \(name.debugDescription) with NaN, which matches nothing"
            }
        }
    }
}
