/// A survey became a candidate and its conditions held.
public struct SurveyTrigger: Sendable, Hashable {
    public let surveyID: String
    /// The event that made it a candidate.
    public let event: RecordedEvent
}
