/// The events a survey emits as it moves through its lifecycle.
///
/// They are recorded like custom events — stored, delivered to listeners,
/// uploaded, and added to the user's event history — but they are never
/// trigger candidates, so a wildcard survey cannot re-show itself from its
/// own `survey_dismissed`. ``EventFrequency`` conditions count them normally.
///
/// Record them with ``SurveyCenter``'s `mark…` methods when your app shows,
/// dismisses or closes a survey; each carries a `survey_id` parameter, and
/// Spool gives the names no meaning beyond that. Subscribe with the matching topics, such as
/// ``EventTopic/surveyCompleted``.
public enum SurveyLifecycleEvent: String, Sendable, CaseIterable {
    /// `survey_shown`: the survey appeared on screen.
    case shown = "survey_shown"
    /// `survey_dismissed`: the survey was dismissed.
    case dismissed = "survey_dismissed"
    /// `survey_closed`: the survey was closed.
    case closed = "survey_closed"
    /// `survey_question_answered`: the user answered one question; carries
    /// `question_id` and `answer`.
    case questionAnswered = "survey_question_answered"
    /// `survey_completed`: the user finished the survey.
    case completed = "survey_completed"

    /// The event name as stored and delivered.
    public var eventName: String { rawValue }

    /// True for the five lifecycle event names.
    static func isLifecycle(_ name: String) -> Bool {
        SurveyLifecycleEvent(rawValue: name) != nil
    }
}

extension EventTopic {
    /// `survey_shown` events.
    public static let surveyShown = EventTopic.named(SurveyLifecycleEvent.shown.eventName)
    /// `survey_dismissed` events.
    public static let surveyDismissed = EventTopic.named(SurveyLifecycleEvent.dismissed.eventName)
    /// `survey_closed` events.
    public static let surveyClosed = EventTopic.named(SurveyLifecycleEvent.closed.eventName)
    /// `survey_question_answered` events.
    public static let surveyQuestionAnswered = EventTopic.named(SurveyLifecycleEvent.questionAnswered.eventName)
    /// `survey_completed` events.
    public static let surveyCompleted = EventTopic.named(SurveyLifecycleEvent.completed.eventName)
}
