import Foundation

/// A stage-2 rule over the user's persisted event history.
///
/// Evaluated after an event made the survey a candidate, at that event's
/// time, as indexed counts over the `event_history` table. Combine rules
/// with ``all(_:)`` and ``any(_:)``:
///
/// ```swift
/// .all([
///     .eventFrequency(EventFrequency("purchase", .atLeast, 3, in: .days(30))),
///     .eventFrequency(EventFrequency("survey_completed", .atMost, 1)),
/// ])
/// ```
public indirect enum SurveyCondition: Sendable, Hashable {
    /// EVENT_FREQUENCY: how often an event occurred in a window.
    case eventFrequency(EventFrequency)
    /// Every condition holds (true when empty).
    case all([SurveyCondition])
    /// At least one condition holds (false when empty).
    case any([SurveyCondition])

    /// No condition: always holds.
    public static let always = SurveyCondition.all([])
}

extension SurveyCondition {
    /// Checks counts and windows; throws the first problem found.
    func validate(surveyID: String) throws(SurveyError) {
        switch self {
        case .eventFrequency(let frequency):
            if frequency.eventName.isEmpty {
                throw .invalidCondition(surveyID: surveyID, reason: "EVENT_FREQUENCY needs an event name")
            }
            if frequency.count < 0 {
                throw .invalidCondition(surveyID: surveyID, reason: "negative count \(frequency.count)")
            }
            if case .last(let seconds) = frequency.window, !(seconds >= 0) || !seconds.isFinite {
                throw .invalidCondition(surveyID: surveyID, reason: "window of \(seconds) seconds")
            }
        case .all(let conditions), .any(let conditions):
            for condition in conditions { try condition.validate(surveyID: surveyID) }
        }
    }
}
