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
    /// Why it triggered: each condition's value and verdict at the event
    /// (an `all`'s or `any`'s parts after the one that decided are not
    /// evaluated). Log it, or print it, to tell why the survey showed.
    public let explanation: SurveyExplanation
}
