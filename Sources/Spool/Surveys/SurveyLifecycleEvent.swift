/// The events a survey emits as it moves through its lifecycle.
///
/// They are recorded like custom events — stored, delivered to listeners,
/// uploaded, and added to the user's event history — but they are never
/// trigger candidates, so a wildcard survey cannot re-show itself from its
/// own `survey_dismissed`. ``EventFrequency`` conditions count them normally.
///
/// Record them with ``SurveyCenter/mark(_:_:parameters:)`` when your app shows,
/// dismisses or closes a survey; each carries a `survey_id` parameter, and
/// Spool gives the names no meaning beyond that. The raw value is the event
/// name as stored and delivered; subscribe with
/// ``EventTopic/survey(_:)``, such as `engine.on(.survey(.completed))`.
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

    /// True for the five lifecycle event names.
    static func isLifecycle(_ name: String) -> Bool {
        SurveyLifecycleEvent(rawValue: name) != nil
    }
}

extension EventTopic {
    /// The events of one lifecycle step of every survey, such as
    /// `.survey(.completed)` for `survey_completed`.
    public static func survey(_ event: SurveyLifecycleEvent) -> EventTopic { .named(event.rawValue) }
}
