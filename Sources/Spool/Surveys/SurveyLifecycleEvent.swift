/// The events a survey emits as it moves through its lifecycle.
///
/// They are recorded like custom events — stored, delivered to listeners,
/// uploaded, and added to the user's event history (S1) — but they are never
/// trigger candidates (S2), so a wildcard survey cannot re-show itself from
/// its own `survey_dismissed`. EVENT_FREQUENCY conditions count them normally
/// (S3).
public enum SurveyLifecycleEvent: String, Sendable, CaseIterable {
    case shown = "survey_shown"
    case dismissed = "survey_dismissed"
    case closed = "survey_closed"
    case questionAnswered = "survey_question_answered"
    case completed = "survey_completed"

    /// The event name as stored and delivered.
    public var eventName: String { rawValue }

    /// True for the five lifecycle event names.
    public static func isLifecycle(_ name: String) -> Bool {
        SurveyLifecycleEvent(rawValue: name) != nil
    }
}

extension EventTopic {
    public static let surveyShown = EventTopic.named(SurveyLifecycleEvent.shown.eventName)
    public static let surveyDismissed = EventTopic.named(SurveyLifecycleEvent.dismissed.eventName)
    public static let surveyClosed = EventTopic.named(SurveyLifecycleEvent.closed.eventName)
    public static let surveyQuestionAnswered = EventTopic.named(SurveyLifecycleEvent.questionAnswered.eventName)
    public static let surveyCompleted = EventTopic.named(SurveyLifecycleEvent.completed.eventName)
}
