/// A survey became a candidate and its conditions held.
///
/// Delivered to ``SurveyCenter/onTrigger(_:)`` callbacks and
/// ``SurveyCenter/triggers()`` streams on the delivery queue, after the
/// listeners got ``event``. Show the survey from here (hop to the main
/// thread for UI).
public struct SurveyTrigger: Sendable, Hashable {
    /// The ``Survey/id`` of the triggered survey.
    public let surveyID: String
    /// The event that made it a candidate.
    public let event: RecordedEvent
}
