import Foundation

/// A parameter value: what `record` accepts and what listeners receive.
///
/// Dates are encoded once, at record time, as ISO 8601 strings with
/// milliseconds in UTC (`2026-11-29T10:15:30.123Z`); listeners, the history and
/// the collector all see that string, never a `Date`.
///
/// Literals build values directly, so parameters read like JSON:
///
/// ```swift
/// try engine.record("purchase", parameters: [
///     "amount": 9.99,                       // .double
///     "items": 3,                           // .int
///     "sku": "A-42",                        // .string
///     "gift": false,                        // .bool
///     "tags": ["sale", "summer"],           // .array
///     "shipping": ["country": "FR"],        // .object
///     "coupon": nil,                        // .null
///     "at": .date(Date()),                  // sent as "2026-11-29T10:15:30.123Z"
/// ])
/// ```
///
/// What a value may hold is bounded: an event name and each parameter key
/// take 1 to 256 UTF-8 bytes without control characters, arrays and objects
/// nest at most 16 deep (the parameters object is level 1), the encoded
/// parameters take at most 1 MiB, and dates fall between ``earliestDate``
/// and ``latestDate``. A value outside them makes `record` throw
/// ``SpoolError/invalidEvent(_:)`` and nothing is stored.
public enum EventValue: Sendable, Hashable {
    /// A string, stored as a JSON string.
    case string(String)
    /// An integer, stored as a JSON integer.
    case int(Int)
    /// A finite double; NaN and infinity are rejected when recorded.
    ///
    /// Stored in its shortest round-trip form, always with a `.` or an
    /// exponent, so it reads back as a double.
    case double(Double)
    /// A Boolean, stored as JSON `true` or `false`.
    case bool(Bool)
    /// A date, recorded as `YYYY-MM-DDTHH:MM:SS.sssZ` to the nearest
    /// millisecond (halves away from 1970).
    ///
    /// Only ``EventValue/earliestDate`` (0000-01-01T00:00:00.000Z) through
    /// ``EventValue/latestDate`` (9999-12-31T23:59:59.999Z) fit four-digit
    /// years; recording any other date, NaN or infinity throws
    /// ``SpoolError/EventProblem/dateOutOfRange(path:)`` and nothing is stored.
    case date(Date)
    /// An array of values, stored as a JSON array.
    case array([EventValue])
    /// Named values, stored as a JSON object with its keys sorted. Keys follow
    /// the same rules as parameter keys.
    case object([String: EventValue])
    /// JSON `null`; also what the `nil` literal makes.
    case null
}

// MARK: - Literals

extension EventValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    /// `"text"` as ``string(_:)``.
    public init(stringLiteral value: String) { self = .string(value) }
    /// `42` as ``int(_:)``.
    public init(integerLiteral value: Int) { self = .int(value) }
    /// `9.99` as ``double(_:)``.
    public init(floatLiteral value: Double) { self = .double(value) }
    /// `true` as ``bool(_:)``.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// `[…]` as ``array(_:)``.
    public init(arrayLiteral elements: EventValue...) { self = .array(elements) }
    /// `nil` as ``null``.
    public init(nilLiteral: ()) { self = .null }

    /// `["key": …]` as ``object(_:)``; a repeated key keeps its last value.
    public init(dictionaryLiteral elements: (String, EventValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

// MARK: - Accessors

extension EventValue {
    /// The string, if this is ``string(_:)`` (dates delivered to listeners
    /// are strings too).
    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The integer, if this is ``int(_:)``.
    public var intValue: Int? {
        if case .int(let value) = self { return value }
        return nil
    }

    /// The number, if this is ``double(_:)`` or ``int(_:)`` (converted).
    public var doubleValue: Double? {
        switch self {
        case .double(let value): return value
        case .int(let value): return Double(value)
        default: return nil
        }
    }

    /// The Boolean, if this is ``bool(_:)``.
    public var boolValue: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    /// The value as listeners receive it: dates replaced by their ISO 8601
    /// strings, everything else unchanged.
    ///
    /// A date outside ``EventValue/earliestDate``...``EventValue/latestDate``
    /// (which recording rejects) becomes the string of the nearer end (NaN:
    /// the earliest).
    var delivered: EventValue {
        switch self {
        case .date(let date): return .string(ISO8601Milliseconds.string(from: date))
        case .array(let values): return values.containsDate ? .array(values.map(\.delivered)) : self
        case .object(let object): return object.containsDate ? .object(object.mapValues(\.delivered)) : self
        default: return self
        }
    }

    var containsDate: Bool {
        switch self {
        case .date: return true
        case .array(let values): return values.containsDate
        case .object(let object): return object.containsDate
        default: return false
        }
    }
}

extension Array where Element == EventValue {
    var containsDate: Bool { contains { $0.containsDate } }
}

extension Dictionary where Key == String, Value == EventValue {
    var containsDate: Bool { values.contains { $0.containsDate } }

    /// The parameters as listeners receive them (dates as strings).
    var delivered: [String: EventValue] { containsDate ? mapValues(\.delivered) : self }
}

// MARK: - Codable

extension EventValue: Codable {
    /// Reads any JSON value: `null`, a Boolean, an integer (else a double), a
    /// string, an array or an object. Dates come back as strings.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        // try?: each probe asks "is it this JSON type?"; a miss tries the next,
        // and the last one throws, so no value is dropped silently.
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int.self) {
            self = .int(value)
        } else if let value = try? container.decode(Double.self) {
            self = .double(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([EventValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: EventValue].self))
        }
    }

    /// Writes the value as JSON, dates as ISO 8601 strings with milliseconds
    /// in UTC.
    ///
    /// - Throws: `EncodingError.invalidValue` for a date outside
    ///   ``EventValue/earliestDate`` through ``EventValue/latestDate``.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .bool(let value): try container.encode(value)
        case .date(let value):
            guard ISO8601Milliseconds.milliseconds(ifRepresentable: value) != nil else {
                // The interval, not the Date: errors get printed, and
                // Foundation's `Date.description` traps for a NaN date (Linux).
                throw EncodingError.invalidValue(
                    value.timeIntervalSince1970,
                    .init(
                        codingPath: encoder.codingPath,
                        debugDescription: "the date is NaN, infinite or, to the nearest millisecond, outside "
                            + SpoolError.EventProblem.representableDates))
            }
            try container.encode(ISO8601Milliseconds.string(from: value))
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        case .null: try container.encodeNil()
        }
    }
}

// MARK: - Limits

/// Limits every recorded event must respect. Exceeding one is a
/// ``SpoolError/invalidEvent(_:)``; nothing is stored.
extension EventValue {
    /// An event name: 1…256 UTF-8 bytes, no control characters.
    static let maximumNameBytes = 256
    /// A parameter key: 1…256 UTF-8 bytes, no control characters.
    static let maximumKeyBytes = 256
    /// Arrays and objects inside the parameters nest at most this deep (the
    /// parameters object itself is level 1).
    static let maximumDepth = 16
    /// The encoded parameters, in bytes: 1 MiB, so an event plus its envelope
    /// always fits alone in one 3.5 MB upload.
    static let maximumEncodedBytes = 1_048_576
    /// The earliest date a parameter can carry: 0000-01-01T00:00:00.000Z
    /// (-62 167 219 200 s since 1970), the first instant of ISO 8601's year
    /// 0000 in the proleptic Gregorian calendar.
    ///
    /// Dates are rounded to the nearest millisecond (halves away from 1970)
    /// before the check, so half a millisecond or more before this is
    /// rejected (``SpoolError/EventProblem/dateOutOfRange(path:)``) and less
    /// than that before it is recorded as this date. NaN and infinite dates
    /// are always rejected.
    public static let earliestDate = Date(
        timeIntervalSince1970: Double(ISO8601Milliseconds.earliestMilliseconds) / 1000)
    /// The latest date a parameter can carry: 9999-12-31T23:59:59.999Z
    /// (253 402 300 799.999 s since 1970), the last millisecond a four-digit
    /// year can express.
    ///
    /// Dates are rounded to the nearest millisecond (halves away from 1970)
    /// before the check, so 9999-12-31T23:59:59.9995Z, which would round
    /// into year 10000, and anything later is rejected
    /// (``SpoolError/EventProblem/dateOutOfRange(path:)``).
    public static let latestDate = Date(
        timeIntervalSince1970: Double(ISO8601Milliseconds.latestMilliseconds) / 1000)
}
