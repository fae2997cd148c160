/// Reads stored parameter JSON back into ``EventValue``s: what every
/// listener, registration, stream and survey trigger receives (the write
/// buffer keeps only the JSON), durable listeners catching up, and tests.
///
/// Numbers with a fraction or exponent read as `.double`, others as `.int`
/// (as ``EventEncoder`` writes them); dates were stored as strings and read
/// back as strings. Nothing in the input can make it trap: a malformed or
/// out-of-range number is a ``Failure``.
struct JSONReader {
    struct Failure: Error, Sendable, Hashable {
        let offset: Int
        let reason: String
    }

    /// The text's UTF-8, borrowed for the duration of one parse.
    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0

    private init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    /// Parses one JSON value that fills the whole text.
    static func parse(_ text: String) throws(Failure) -> EventValue {
        var text = text
        // Straight from the string's UTF-8, no copy (durable listeners and
        // delivery parse every stored event they hand over).
        let result = text.withUTF8 { bytes -> Result<EventValue, Failure> in
            var reader = JSONReader(bytes)
            do throws(Failure) {
                let value = try reader.readValue(depth: 0)
                reader.skipWhitespace()
                guard reader.index == bytes.count else { return .failure(reader.failure("trailing characters")) }
                return .success(value)
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// Parses a JSON object into parameters.
    static func parseObject(_ text: String) throws(Failure) -> [String: EventValue] {
        guard case .object(let object) = try parse(text) else { throw Failure(offset: 0, reason: "not an object") }
        return object
    }

    private func failure(_ reason: String) -> Failure {
        Failure(offset: index, reason: reason)
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }

    private mutating func readValue(depth: Int) throws(Failure) -> EventValue {
        guard depth < 512 else { throw failure("nesting too deep") }
        skipWhitespace()
        guard index < bytes.count else { throw failure("unexpected end") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try readObject(depth: depth)
        case UInt8(ascii: "["): return try readArray(depth: depth)
        case UInt8(ascii: "\""): return .string(try readString())
        case UInt8(ascii: "t"):
            try expect("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expect("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expect("null")
            return .null
        default: return try readNumber()
        }
    }

    private mutating func expect(_ word: StaticString) throws(Failure) {
        let count = word.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw failure("unexpected end") }
        for offset in 0..<count where bytes[index + offset] != word.utf8Start[offset] {
            throw failure("unexpected literal")
        }
        index += count
    }

    private mutating func readObject(depth: Int) throws(Failure) -> EventValue {
        index += 1
        var object: [String: EventValue] = [:]
        object.reserveCapacity(8)
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(object)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw failure("expected a key") }
            let key = try readString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw failure("expected ':'") }
            index += 1
            object[key] = try readValue(depth: depth + 1)
            skipWhitespace()
            guard index < bytes.count else { throw failure("unexpected end") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
            } else if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(object)
            } else {
                throw failure("expected ',' or '}'")
            }
        }
    }

    private mutating func readArray(depth: Int) throws(Failure) -> EventValue {
        index += 1
        var array: [EventValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(array)
        }
        while true {
            array.append(try readValue(depth: depth + 1))
            skipWhitespace()
            guard index < bytes.count else { throw failure("unexpected end") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
            } else if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(array)
            } else {
                throw failure("expected ',' or ']'")
            }
        }
    }

    private mutating func readString() throws(Failure) -> String {
        index += 1  // opening quote
        // Fast path: no escape before the closing quote (almost every string).
        var end = index
        while end < bytes.count {
            let byte = bytes[end]
            if byte == UInt8(ascii: "\"") {
                let string = String(decoding: UnsafeBufferPointer(rebasing: bytes[index..<end]), as: UTF8.self)
                index = end + 1
                return string
            }
            if byte == UInt8(ascii: "\\") || byte < 0x20 { break }
            end += 1
        }
        var output: [UInt8] = []
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                return String(decoding: output, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard index < bytes.count else { throw failure("unexpected end") }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): output.append(escape)
                case UInt8(ascii: "n"): output.append(0x0A)
                case UInt8(ascii: "r"): output.append(0x0D)
                case UInt8(ascii: "t"): output.append(0x09)
                case UInt8(ascii: "b"): output.append(0x08)
                case UInt8(ascii: "f"): output.append(0x0C)
                case UInt8(ascii: "u"):
                    var scalar = try readHex4()
                    if (0xD800..<0xDC00).contains(scalar), index + 1 < bytes.count,
                        bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
                    {
                        let next = index
                        index += 2
                        let low = try readHex4()
                        if (0xDC00..<0xE000).contains(low) {
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        } else {
                            index = next  // not a pair: that escape is read on its own
                        }
                    }
                    // An unpaired surrogate is no scalar: U+FFFD, as String(decoding:) does.
                    output.append(contentsOf: String(Unicode.Scalar(scalar) ?? "\u{FFFD}").utf8)
                default: throw failure("invalid escape")
                }
            default:
                guard byte >= 0x20 else { throw failure("control character in string") }
                output.append(byte)
            }
        }
        throw failure("unterminated string")
    }

    private mutating func readHex4() throws(Failure) -> UInt32 {
        guard index + 4 <= bytes.count else { throw failure("unexpected end") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            index += 1
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw failure("invalid \\u escape")
            }
            value = value * 16 + digit
        }
        return value
    }

    /// An RFC 8259 number. An integer past `Int` reads as the nearest double
    /// (as SQLite's JSON functions do); a number past `Double` is a failure,
    /// since no ``EventValue`` can carry infinity.
    private mutating func readNumber() throws(Failure) -> EventValue {
        let start = index
        skip(UInt8(ascii: "-"))
        if !skip(UInt8(ascii: "0")) {
            guard index < bytes.count, (UInt8(ascii: "1")...UInt8(ascii: "9")).contains(bytes[index]) else {
                throw failure("invalid number")
            }
            skipDigits()
        }
        var isInteger = true
        if skip(UInt8(ascii: ".")) {
            isInteger = false
            guard skipDigits() else { throw failure("invalid number") }
        }
        if skip(UInt8(ascii: "e")) || skip(UInt8(ascii: "E")) {
            isInteger = false
            _ = skip(UInt8(ascii: "+")) || skip(UInt8(ascii: "-"))
            guard skipDigits() else { throw failure("invalid number") }
        }
        if isInteger, let int = Self.integer(UnsafeBufferPointer(rebasing: bytes[start..<index])) { return .int(int) }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        guard let double = Double(text), double.isFinite else { throw failure("number out of range") }
        return .double(double)
    }

    /// `-?[0-9]+` as an `Int`, or nil when it does not fit.
    private static func integer(_ digits: UnsafeBufferPointer<UInt8>) -> Int? {
        var rest = digits[...]
        let negative = rest.first == UInt8(ascii: "-")
        if negative { rest = rest.dropFirst() }
        var magnitude: UInt64 = 0
        for byte in rest {
            let (times10, overflow) = magnitude.multipliedReportingOverflow(by: 10)
            let (sum, carry) = times10.addingReportingOverflow(UInt64(byte &- UInt8(ascii: "0")))
            guard !overflow, !carry else { return nil }
            magnitude = sum
        }
        if negative {
            return magnitude <= UInt64(Int.max) + 1 ? Int(truncatingIfNeeded: 0 &- magnitude) : nil
        }
        return magnitude <= UInt64(Int.max) ? Int(magnitude) : nil
    }

    @discardableResult
    private mutating func skip(_ byte: UInt8) -> Bool {
        guard index < bytes.count, bytes[index] == byte else { return false }
        index += 1
        return true
    }

    /// Skips `[0-9]*`; false when there was none.
    @discardableResult
    private mutating func skipDigits() -> Bool {
        let start = index
        while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
        return index > start
    }
}

extension EventValue {
    /// Stored parameters read back into values.
    static func parameters(fromJSON json: String) -> [String: EventValue] {
        // try?: Spool's encoder writes an object by construction, and any
        // other writer of the file meets the schema's CHECK (json_valid), so
        // nothing stored is lost here.
        (try? JSONReader.parseObject(json)) ?? [:]
    }
}
