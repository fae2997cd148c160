import Foundation
import SpoolStorage

/// A test on one value: an event property in a ``PropertyFilter``, or a
/// trait of the current identity in ``SurveyCondition/trait(_:_:)``.
///
/// Only strings, numbers, Booleans and dates are compared. A Boolean
/// compares as the number 1 or 0 (so `.equals(true)` also matches the
/// number 1), an integer and a double with the same value are equal, and a
/// date compares as the ISO 8601 text it was recorded as. A value that is
/// missing, `null`, an array or an object matches nothing, not even
/// ``notEquals(_:)``.
public enum ValueMatch: Sendable, Hashable {
    /// The value equals this one (a string, number, Boolean or date).
    case equals(EventValue)
    /// The value is present and differs from this one.
    case notEquals(EventValue)
    /// The value is a number greater than this one.
    case greaterThan(Double)
    /// The value is a number less than this one.
    case lessThan(Double)
    /// The value is a string that contains this text (case-sensitive,
    /// compared as UTF-8 bytes).
    case contains(String)
    /// The value is present (a string, number, Boolean or date).
    case exists

    /// Whether `value` passes the test.
    func matches(_ value: HistoryValue?) -> Bool {
        guard let value else { return false }
        switch self {
        case .equals(let operand): return operand.historyValue.map(value.matches) ?? false
        case .notEquals(let operand): return !(operand.historyValue.map(value.matches) ?? false)
        case .greaterThan(let bound): return value.isGreater(than: bound)
        case .lessThan(let bound): return value.isLess(than: bound)
        case .contains(let text):
            guard case .text(let string) = value else { return false }
            return Self.bytes(of: string, contain: text)
        case .exists: return true
        }
    }

    /// True when the UTF-8 bytes of `needle` occur in those of `haystack`.
    private static func bytes(of haystack: String, contain needle: String) -> Bool {
        let needle = Array(needle.utf8)
        let haystack = Array(haystack.utf8)
        guard !needle.isEmpty else { return true }
        guard haystack.count >= needle.count else { return false }
        for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
            if haystack[start..<(start + needle.count)].elementsEqual(needle) { return true }
        }
        return false
    }

    /// The problem with its operand, if any (nil: none).
    func problem(surveyID: String, name: String) -> SpoolError.SurveyProblem? {
        switch self {
        case .equals(let operand), .notEquals(let operand):
            if case .double(let number) = operand, number.isNaN {
                return .nanComparisonValue(surveyID: surveyID, name: name)
            }
            if operand.historyValue == nil {
                return .invalidCondition(
                    surveyID: surveyID, reason: "\(name) is compared with a null, an array or an object")
            }
            if case .date(let date) = operand, ISO8601Milliseconds.milliseconds(ifRepresentable: date) == nil {
                return .invalidCondition(
                    surveyID: surveyID,
                    reason: "\(name) is compared with a date no event can carry (EventValue.earliestDate…latestDate)")
            }
        case .greaterThan(let bound), .lessThan(let bound):
            if bound.isNaN { return .nanComparisonValue(surveyID: surveyID, name: name) }
        case .contains, .exists: break
        }
        return nil
    }
}

/// A filter on one event property: ``EventFrequency`` counts only the
/// occurrences whose property passes it.
///
/// The history keeps a property's values only for the events and
/// properties a registered survey declares in ``Survey/historyProperties``,
/// and only from the moment it is registered: occurrences recorded before
/// have no value, and no filter matches them.
///
/// ```swift
/// EventFrequency("purchase", .atLeast, 3, in: .days(30), where: .property("amount", .greaterThan(50)))
/// ```
public struct PropertyFilter: Sendable, Hashable {
    /// The parameter's key in the event.
    let property: String
    /// The test its value must pass.
    let match: ValueMatch

    /// A filter on the event parameter `property`.
    public static func property(_ property: String, _ match: ValueMatch) -> PropertyFilter {
        PropertyFilter(property: property, match: match)
    }
}

extension EventValue {
    /// What the history keeps of this value (nil: nothing: null, arrays and
    /// objects, and a non-finite double).
    var historyValue: HistoryValue? {
        switch self {
        case .string(let string): return .text(string)
        case .int(let integer): return .integer(Int64(integer))
        case .double(let double): return double.isFinite ? .real(double) : nil
        case .bool(let bool): return .integer(bool ? 1 : 0)
        case .date(let date): return .text(ISO8601Milliseconds.string(from: date))
        case .array, .object, .null: return nil
        }
    }

    /// The stored value as listeners would see it.
    init(_ value: HistoryValue) {
        switch value {
        case .integer(let integer): self = .int(Int(clamping: integer))
        case .real(let double): self = .double(double)
        case .text(let string): self = .string(string)
        }
    }
}
