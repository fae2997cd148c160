import Foundation

/// A rule a survey's trigger must also pass: over the user's persisted event
/// history, the current identity, or a stable sample of users.
///
/// Evaluated after an event made the survey a candidate, at that event, as
/// indexed reads of the `event_history` and `event_history_values` tables.
/// Combine rules with ``all(_:)``, ``any(_:)`` and ``not(_:)``:
///
/// ```swift
/// .all([
///     .eventFrequency(EventFrequency("purchase", .atLeast, 3, in: .days(30),
///                                    where: .property("amount", .greaterThan(50)))),
///     .trait("plan", .equals("pro")),
///     .sampled(percent: 10),
///     .not(.eventFrequency(EventFrequency("survey_shown", .atLeast, 1, in: .days(14)))),
/// ])
/// ```
public indirect enum SurveyCondition: Sendable, Hashable {
    /// EVENT_FREQUENCY: how often an event occurred in a window, optionally
    /// only the occurrences whose property passes a filter.
    case eventFrequency(EventFrequency)
    /// One event, then another within a window, optionally with no third
    /// one after it.
    case sequence(EventSequence)
    /// How long ago an event last occurred.
    case timeSinceLast(TimeSinceLast)
    /// A trait of the current identity (what ``EventEngine/identify(userId:traits:)``
    /// said, in force when the rule is evaluated) passes the test.
    case trait(String, ValueMatch)
    /// A stable `percent` of users (0 through 100): the same ones at every
    /// launch and in every process on the file, chosen again after
    /// ``EventEngine/reset()`` or ``EventEngine/eraseAllData()`` (a new
    /// anonymous id). Each survey samples on its own.
    ///
    /// A user is in the sample when `bucket < percent`, where `bucket` is
    /// computed from the anonymous id and the survey id: the 64-bit FNV-1a
    /// hash of the UTF-8 bytes of the anonymous id, one zero byte and the
    /// survey id, passed through the SplitMix64 finalizer, and its top 53
    /// bits divided by 2⁵³ and multiplied by 100. A server can compute the
    /// same bucket.
    case sampled(percent: Double)
    /// Every condition holds (true when empty).
    case all([SurveyCondition])
    /// At least one condition holds (false when empty).
    case any([SurveyCondition])
    /// The condition does not hold.
    case not(SurveyCondition)

    /// No condition: always holds.
    public static let always = SurveyCondition.all([])
}

extension SurveyCondition {
    /// Checks the condition for `surveyID`, whose filters may read the
    /// properties in `declared` (event name → property names); throws the
    /// first problem found.
    func validate(surveyID: String, declared: [String: Set<String>]) throws(SpoolError) {
        func invalid(_ reason: String) -> SpoolError {
            .invalidSurvey(.invalidCondition(surveyID: surveyID, reason: reason))
        }
        func checkName(_ name: String, _ what: String) throws(SpoolError) {
            if name.isEmpty { throw invalid("\(what) needs an event name") }
        }
        func checkWindow(_ window: EventFrequency.Window) throws(SpoolError) {
            if case .last(let seconds) = window, !(seconds >= 0) || !seconds.isFinite {
                throw invalid("window of \(seconds) seconds")
            }
        }
        switch self {
        case .eventFrequency(let frequency):
            try checkName(frequency.eventName, "EVENT_FREQUENCY")
            if frequency.count < 0 { throw invalid("negative count \(frequency.count)") }
            try checkWindow(frequency.window)
            if let filter = frequency.filter {
                if filter.property.isEmpty { throw invalid("a property filter needs a property name") }
                guard declared[frequency.eventName]?.contains(filter.property) ?? false else {
                    throw .invalidSurvey(
                        .undeclaredProperty(
                            surveyID: surveyID, eventName: frequency.eventName, property: filter.property))
                }
                if let problem = filter.match.problem(surveyID: surveyID, name: filter.property) {
                    throw .invalidSurvey(problem)
                }
            }
        case .sequence(let sequence):
            try checkName(sequence.first, "a sequence")
            try checkName(sequence.second, "a sequence")
            if sequence.first == sequence.second {
                throw invalid("a sequence of \(sequence.first) with itself: count it with EVENT_FREQUENCY")
            }
            if sequence.gap == .ever { throw .invalidSurvey(.sequenceWithoutWindow(surveyID: surveyID)) }
            try checkWindow(sequence.gap)
            try checkWindow(sequence.window)
            if let absence = sequence.absence {
                try checkName(absence.eventName, "a sequence's absent event")
                guard case .last = absence.within else {
                    throw .invalidSurvey(.sequenceWithoutWindow(surveyID: surveyID))
                }
                try checkWindow(absence.within)
            }
        case .timeSinceLast(let since):
            try checkName(since.eventName, "a time since the last occurrence")
            if !(since.seconds >= 0) || !since.seconds.isFinite { throw invalid("time of \(since.seconds) seconds") }
        case .trait(let trait, let match):
            if trait.isEmpty { throw invalid("a trait condition needs a trait name") }
            if let problem = match.problem(surveyID: surveyID, name: trait) { throw .invalidSurvey(problem) }
        case .sampled(let percent):
            if !(percent >= 0 && percent <= 100) {
                throw .invalidSurvey(.samplingOutOfRange(surveyID: surveyID, percent: percent))
            }
        case .all(let conditions), .any(let conditions):
            for condition in conditions { try condition.validate(surveyID: surveyID, declared: declared) }
        case .not(let condition):
            try condition.validate(surveyID: surveyID, declared: declared)
        }
    }
}
