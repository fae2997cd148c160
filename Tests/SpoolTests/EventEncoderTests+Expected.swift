import Foundation

@testable import Spool

/// What ``EventEncoder`` must make of an event, worked out apart from it:
/// the first error in its order (name first; then keys sorted, depth first,
/// each value checked as it is written and the running size after it), with
/// the path it names; nil when the event is valid.
struct ExpectedEncoding {
    private var length = 0

    static func error(name: String, parameters: [String: EventValue]) -> SpoolError.EventProblem? {
        let nameBytes = name.utf8.count
        if nameBytes == 0 { return .emptyName }
        if nameBytes > EventValue.maximumNameBytes {
            return .nameTooLong(bytes: nameBytes, limit: EventValue.maximumNameBytes)
        }
        if name.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) { return .invalidName(name) }
        var model = ExpectedEncoding()
        if let error = model.object(parameters, depth: 1, path: "") { return error }
        return model.tooLarge
    }

    private var tooLarge: SpoolError.EventProblem? {
        length > EventValue.maximumEncodedBytes
            ? .tooLarge(bytes: length, limit: EventValue.maximumEncodedBytes) : nil
    }

    private mutating func value(_ value: EventValue, depth: Int, path: String) -> SpoolError.EventProblem? {
        switch value {
        case .string(let string): length += Self.quotedLength(string)
        case .int(let int): length += String(int).utf8.count
        case .double(let double):
            guard double.isFinite else { return .nonFiniteNumber(path: path) }
            length += "\(double)".utf8.count
        case .bool(let bool): length += bool ? 4 : 5
        case .null: length += 4
        case .date(let date):
            // 0000-01-01T00:00:00.000Z...9999-12-31T23:59:59.999Z, to the nearest millisecond.
            let milliseconds = (date.timeIntervalSince1970 * 1000).rounded()
            guard milliseconds >= -62_167_219_200_000, milliseconds <= 253_402_300_799_999 else {
                return .dateOutOfRange(path: path)
            }
            length += 26
        case .array(let values):
            if let error = array(values, depth: depth + 1, path: path) { return error }
        case .object(let object):
            if let error = self.object(object, depth: depth + 1, path: path) { return error }
        }
        return tooLarge
    }

    private mutating func array(_ values: [EventValue], depth: Int, path: String) -> SpoolError.EventProblem? {
        guard depth <= EventValue.maximumDepth else {
            return .nestingTooDeep(path: path, limit: EventValue.maximumDepth)
        }
        length += 1
        for (index, element) in values.enumerated() {
            if index > 0 { length += 1 }
            if let error = value(element, depth: depth, path: path + "[\(index)]") { return error }
        }
        length += 1
        return nil
    }

    private mutating func object(_ object: [String: EventValue], depth: Int, path: String) -> SpoolError.EventProblem? {
        guard depth <= EventValue.maximumDepth else {
            return .nestingTooDeep(path: path, limit: EventValue.maximumDepth)
        }
        length += 1
        for (index, (key, element)) in object.sorted(by: { $0.key < $1.key }).enumerated() {
            if index > 0 { length += 1 }
            let keyBytes = key.utf8.count
            guard keyBytes > 0, keyBytes <= EventValue.maximumKeyBytes,
                !key.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
            else { return .invalidKey(path: path + "." + key.debugDescription) }
            length += Self.quotedLength(key) + 1
            if let error = value(element, depth: depth, path: path + "." + key) { return error }
        }
        length += 1
        return nil
    }

    /// A JSON string literal's length: quotes, plus two bytes for each short
    /// escape and six for each `\u00XX`.
    private static func quotedLength(_ string: String) -> Int {
        2
            + string.utf8.reduce(0) { total, byte in
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), 0x0A, 0x0D, 0x09, 0x08, 0x0C: return total + 2
                case 0..<0x20: return total + 6
                default: return total + 1
                }
            }
    }
}

extension SpoolError.EventProblem {
    /// The case's name, to count which kinds of error came up.
    var kind: String {
        switch self {
        case .emptyName: return "emptyName"
        case .nameTooLong: return "nameTooLong"
        case .invalidName: return "invalidName"
        case .invalidKey: return "invalidKey"
        case .nonFiniteNumber: return "nonFiniteNumber"
        case .nestingTooDeep: return "nestingTooDeep"
        case .dateOutOfRange: return "dateOutOfRange"
        case .tooLarge: return "tooLarge"
        }
    }
}
