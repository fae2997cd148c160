extension SpoolError {
    /// Why an event was rejected before it was stored.
    ///
    /// `record` throws it as ``SpoolError/invalidEvent(_:)``; nothing was
    /// stored, and the events recorded before and after it are unaffected. A
    /// `path` names the offending value inside the parameters, such as
    /// `.items[2].price`. The limits are listed in ``EventValue``.
    public enum EventProblem: Sendable, Hashable, CustomStringConvertible {
        /// The name is empty.
        case emptyName
        /// The name is longer than the limit, in UTF-8 bytes.
        case nameTooLong(bytes: Int, limit: Int)
        /// The name contains control characters.
        case invalidName(String)
        /// A parameter key is empty, too long or holds control characters.
        case invalidKey(path: String)
        /// A double is NaN or infinite, which JSON cannot carry.
        case nonFiniteNumber(path: String)
        /// Arrays and objects nest deeper than the limit.
        case nestingTooDeep(path: String, limit: Int)
        /// A date is NaN, infinite, or outside what ISO 8601 with four-digit
        /// years can express: ``EventValue/earliestDate`` through
        /// ``EventValue/latestDate``.
        case dateOutOfRange(path: String)
        /// The encoded event is larger than the limit, in bytes.
        case tooLarge(bytes: Int, limit: Int)

        /// A sentence naming the limit and where in the parameters it was broken.
        public var description: String {
            switch self {
            case .emptyName: return "the event name is empty"
            case .nameTooLong(let bytes, let limit): return "the event name is \(bytes) bytes; the limit is \(limit)"
            case .invalidName(let name): return "the event name \(name.debugDescription) contains control characters"
            case .invalidKey(let path):
                return "invalid parameter key at \(path) (empty, over 256 bytes or with control characters)"
            case .nonFiniteNumber(let path): return "the number at \(path) is NaN or infinite"
            case .nestingTooDeep(let path, let limit): return "parameters nest deeper than \(limit) levels at \(path)"
            case .dateOutOfRange(let path):
                return "the date at \(path) is NaN, infinite or, to the nearest millisecond, outside "
                    + Self.representableDates
            case .tooLarge(let bytes, let limit): return "the encoded event is \(bytes) bytes; the limit is \(limit)"
            }
        }

        static let representableDates =
            "0000-01-01T00:00:00.000Z through 9999-12-31T23:59:59.999Z (what ISO 8601 with four-digit years can express)"
    }
}
