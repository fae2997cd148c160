import Foundation

/// Why a survey's conditions held, or did not, at one moment: what each
/// condition measured and its verdict.
///
/// ``SurveyCenter/explain(surveyID:)`` returns one for now; every
/// ``SurveyTrigger`` carries the one of its event. Print it for a readable
/// tree:
///
/// ```
/// survey "checkout" holds at 2026-11-29T10:15:30.123Z
/// ✓ all of
///   ✓ purchase where amount > 50.0, at least 3 in the last 30 days: 4 or more
///   ✓ trait plan equals "pro": "pro"
///   ✓ sampled 10.0%: bucket 3.71
/// ```
public struct SurveyExplanation: Sendable, Hashable, CustomStringConvertible {
    /// The survey explained.
    public let surveyID: String
    /// The moment the conditions were evaluated at: the triggering event's
    /// time, or when ``SurveyCenter/explain(surveyID:)`` read the history.
    public let evaluatedAt: Date
    /// The verdict of the survey's ``Survey/conditions``, with its parts.
    public let verdict: ConditionVerdict

    /// Whether the conditions held.
    public var holds: Bool { verdict.holds == true }

    /// The verdicts as an indented tree, one condition per line.
    public var description: String {
        let when = ISO8601Milliseconds.string(from: evaluatedAt)
        var lines = ["survey \(surveyID.debugDescription) \(holds ? "holds" : "does not hold") at \(when)"]
        verdict.appendLines(to: &lines, depth: 0)
        return lines.joined(separator: "\n")
    }
}

/// One condition's verdict within a ``SurveyExplanation``.
public struct ConditionVerdict: Sendable, Hashable {
    /// What a condition measured.
    public enum Observation: Sendable, Hashable {
        /// The occurrences an ``EventFrequency`` counted; `orMore` when the
        /// count stopped at its cap (the rule's count + 1), so there may be
        /// more.
        case occurrences(Int, orMore: Bool)
        /// When the latest matching occurrence of the sequence's `second` came (to the
        /// millisecond), or nil when no occurrence matched.
        case sequenceMatched(at: Date?)
        /// How long ago the event last occurred, or nil when it never did.
        case secondsSinceLast(TimeInterval?)
        /// The trait's value, or nil when the identity has no such trait.
        case traitValue(EventValue?)
        /// The user's sampling bucket, from 0 up to (not including) 100.
        case bucket(Double)
        /// `all`, `any` or `not`: see ``ConditionVerdict/parts``.
        case combined
        /// Not evaluated: an earlier part of an `all` failed, or of an `any`
        /// held, so the answer was known; or, for sampling, no anonymous id
        /// was known yet.
        case notEvaluated
    }

    /// The condition.
    public let condition: SurveyCondition
    /// What it measured.
    public let observation: Observation
    /// Whether it held; nil when it was not evaluated.
    public let holds: Bool?
    /// The verdicts of an `all`'s, `any`'s or `not`'s conditions, in order.
    public let parts: [ConditionVerdict]

    init(_ condition: SurveyCondition, _ observation: Observation, holds: Bool?, parts: [ConditionVerdict] = []) {
        self.condition = condition
        self.observation = observation
        self.holds = holds
        self.parts = parts
    }

    fileprivate func appendLines(to lines: inout [String], depth: Int) {
        let mark = holds.map { $0 ? "✓" : "✗" } ?? "·"
        let indent = String(repeating: "  ", count: depth)
        let measured = observation.text.map { ": \($0)" } ?? ""
        lines.append("\(indent)\(mark) \(condition.summary)\(measured)")
        for part in parts { part.appendLines(to: &lines, depth: depth + 1) }
    }
}

extension ConditionVerdict.Observation {
    /// What was measured, in words; nil for combinations.
    fileprivate var text: String? {
        switch self {
        case .occurrences(let count, let orMore): return orMore ? "\(count) or more" : "\(count)"
        case .sequenceMatched(let date):
            return date.map { "matched at \(ISO8601Milliseconds.string(from: $0))" } ?? "no match"
        case .secondsSinceLast(let seconds): return seconds.map { "\(duration($0)) ago" } ?? "never"
        case .traitValue(let value): return value.map(\.summary) ?? "no such trait"
        case .bucket(let bucket): return "bucket \((bucket * 100).rounded() / 100)"
        case .combined: return nil
        case .notEvaluated: return "not evaluated"
        }
    }
}

extension SurveyCondition {
    /// The condition in one line.
    var summary: String {
        switch self {
        case .eventFrequency(let frequency):
            let filter = frequency.filter.map { " where \($0.property) \($0.match.summary)" } ?? ""
            let comparison =
                switch frequency.comparison {
                case .atLeast: "at least"
                case .atMost: "at most"
                case .exactly: "exactly"
                }
            return "\(frequency.eventName)\(filter), \(comparison) \(frequency.count) \(frequency.window.summary)"
        case .sequence(let sequence):
            let absence = sequence.absence.map { ", not followed by \($0.eventName) \($0.within.summary)" } ?? ""
            return "\(sequence.first) then \(sequence.second) \(sequence.gap.summary)\(absence)"
                + (sequence.window == .ever ? "" : ", \(sequence.window.summary)")
        case .timeSinceLast(let since):
            let comparison = since.comparison == .atLeast ? "at least" : "at most"
            return "last \(since.eventName) \(comparison) \(duration(since.seconds)) ago"
        case .trait(let trait, let match): return "trait \(trait) \(match.summary)"
        case .sampled(let percent): return "sampled \(percent)%"
        case .all(let parts): return parts.isEmpty ? "always" : "all of"
        case .any(let parts): return parts.isEmpty ? "any of (none)" : "any of"
        case .not: return "not"
        }
    }
}

extension EventFrequency.Window {
    /// "ever", "in the last 30 days", "in this session".
    var summary: String {
        switch self {
        case .ever: "ever"
        case .last(let seconds): "in the last \(duration(seconds))"
        case .thisSession: "in this session"
        }
    }
}

extension ValueMatch {
    /// "> 50.0", "equals \"pro\"".
    var summary: String {
        switch self {
        case .equals(let value): "equals \(value.summary)"
        case .notEquals(let value): "not equal to \(value.summary)"
        case .greaterThan(let bound): "> \(bound)"
        case .lessThan(let bound): "< \(bound)"
        case .contains(let text): "contains \(text.debugDescription)"
        case .exists: "exists"
        }
    }
}

extension EventValue {
    /// The value as it would read in JSON.
    fileprivate var summary: String {
        switch self {
        case .string(let string): string.debugDescription
        case .int(let integer): "\(integer)"
        case .double(let double): "\(double)"
        case .bool(let bool): "\(bool)"
        case .date(let date): ISO8601Milliseconds.string(from: date).debugDescription
        case .array, .object, .null: "\(self)"
        }
    }
}

/// Seconds in the largest whole unit that fits: "30 days", "10 minutes",
/// "1.5 s".
private func duration(_ seconds: TimeInterval) -> String {
    for (unit, name) in [(86_400.0, "day"), (3_600, "hour"), (60, "minute")] where seconds >= unit {
        let count = seconds / unit
        if count == count.rounded(), let whole = Int(exactly: count) {
            return "\(whole) \(name)\(whole == 1 ? "" : "s")"
        }
    }
    return "\((seconds * 1000).rounded() / 1000) s"
}
