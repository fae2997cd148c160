import Foundation
import SpoolStorage

/// Encodes parameters straight from ``EventValue`` into canonical JSON bytes,
/// validating as it goes.
///
/// Canonical: object keys sorted (Swift's String order), no whitespace, strings
/// escaped per RFC 8259, integers as integers, doubles in Swift's shortest
/// round-trip form (always with a `.` or an exponent, so they read back as
/// doubles), dates as ISO 8601 strings with milliseconds in UTC (only dates in
/// ``EventValue/earliestDate``...``EventValue/latestDate``). About ten
/// times cheaper than `JSONEncoder` for a 10-key object.
struct EventEncoder {
    private var bytes: ByteBuffer

    /// Checks an event name against the limits (``EventValue``).
    static func validate(name: String) throws(SpoolError) {
        let count = name.utf8.count
        if count == 0 { throw .invalidEvent(.emptyName) }
        if count > EventValue.maximumNameBytes {
            throw .invalidEvent(.nameTooLong(bytes: count, limit: EventValue.maximumNameBytes))
        }
        if withUTF8Bytes(of: name, { $0.contains(where: isControl) }) { throw .invalidEvent(.invalidName(name)) }
    }

    /// A control character, which names and keys may not hold: below 0x20,
    /// or DEL.
    @inline(__always)
    static func isControl(_ byte: UInt8) -> Bool { byte < 0x20 || byte == 0x7F }

    /// The canonical JSON object for `parameters`.
    static func encode(_ parameters: [String: EventValue]) throws(SpoolError) -> String {
        var encoder = EventEncoder(bytes: ByteBuffer(capacity: 64 + parameters.count * 24))
        defer { encoder.bytes.deallocate() }
        try encoder.writeObject(parameters, depth: 1)
        if encoder.bytes.count > EventValue.maximumEncodedBytes {
            throw .invalidEvent(.tooLarge(bytes: encoder.bytes.count, limit: EventValue.maximumEncodedBytes))
        }
        return String(decoding: encoder.bytes.bytes, as: UTF8.self)
    }

    // MARK: - Values

    private mutating func write(_ value: EventValue, depth: Int) throws(SpoolError) {
        switch value {
        case .string(let string): writeString(string)
        case .int(let int): writeInt(int)
        case .double(let double):
            guard double.isFinite else { throw .invalidEvent(.nonFiniteNumber(path: "")) }
            var text = double.description
            text.withUTF8 { bytes.appendBytes(UnsafeRawBufferPointer($0)) }
        case .bool(let bool): writeLiteral(bool ? "true" : "false")
        case .null: writeLiteral("null")
        case .date(let date):
            guard let milliseconds = ISO8601Milliseconds.milliseconds(ifRepresentable: date) else {
                throw .invalidEvent(.dateOutOfRange(path: ""))
            }
            bytes.append(UInt8(ascii: "\""))
            ISO8601Milliseconds.append(milliseconds: milliseconds, to: &bytes)
            bytes.append(UInt8(ascii: "\""))
        case .array(let array): try writeArray(array, depth: depth + 1)
        case .object(let object): try writeObject(object, depth: depth + 1)
        }
        if bytes.count > EventValue.maximumEncodedBytes {
            throw .invalidEvent(.tooLarge(bytes: bytes.count, limit: EventValue.maximumEncodedBytes))
        }
    }

    private mutating func writeLiteral(_ literal: StaticString) {
        bytes.appendBytes(UnsafeRawBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
    }

    private mutating func writeArray(_ array: [EventValue], depth: Int) throws(SpoolError) {
        guard depth <= EventValue.maximumDepth else {
            throw .invalidEvent(.nestingTooDeep(path: "", limit: EventValue.maximumDepth))
        }
        bytes.append(UInt8(ascii: "["))
        for (index, element) in array.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            do {
                try write(element, depth: depth)
            } catch {
                throw error.prefixed(with: "[\(index)]")
            }
        }
        bytes.append(UInt8(ascii: "]"))
    }

    private mutating func writeObject(_ object: [String: EventValue], depth: Int) throws(SpoolError) {
        guard depth <= EventValue.maximumDepth else {
            throw .invalidEvent(.nestingTooDeep(path: "", limit: EventValue.maximumDepth))
        }
        bytes.append(UInt8(ascii: "{"))
        // The entries are put in key order in a temporary buffer (on the
        // stack for small objects) by moving them, so sorting copies no
        // value. Any fixed order makes the output deterministic; this one is
        // String's `<`, mostly decided by the keys' first eight bytes.
        try withUnsafeTemporaryAllocation(of: Entry.self, capacity: object.count) {
            (entries) throws(SpoolError) in
            guard let base = entries.baseAddress else { return }  // no entries
            var count = 0
            for entry in object {
                (base + count).initialize(to: Entry(key: entry.key, value: entry.value))
                count += 1
            }
            // Each entry is moved out as it is written; an error leaves the
            // rest to this.
            var written = 0
            defer { (base + written).deinitialize(count: count - written) }
            Self.sortByKey(UnsafeMutableBufferPointer(start: base, count: count))
            while written < count {
                let entry = (base + written).move()
                written += 1
                if written > 1 { bytes.append(UInt8(ascii: ",")) }
                guard entry.isValidKey else { throw .invalidEvent(.invalidKey(path: "." + entry.key.debugDescription)) }
                Self.appendJSONString(entry.key, to: &bytes)
                bytes.append(UInt8(ascii: ":"))
                do throws(SpoolError) {
                    try write(entry.value, depth: depth)
                } catch {
                    throw error.prefixed(with: "." + entry.key)
                }
            }
        }
        bytes.append(UInt8(ascii: "}"))
    }

    /// One member of an object being written, with what sorting and
    /// checking its key need, read from the key's bytes once.
    private struct Entry {
        let key: String
        let value: EventValue
        /// The key's first eight UTF-8 bytes, big-endian, zero-padded.
        let prefix: UInt64
        /// All of the key's bytes are ASCII: for two such keys, different
        /// prefixes order them as String's `<` does (which, for ASCII,
        /// compares bytes).
        let isASCII: Bool
        /// Non-empty, at most `EventValue.maximumKeyBytes`, and free of
        /// control characters.
        let isValidKey: Bool

        /// Inlined, so each entry is written straight into the sort buffer
        /// instead of being built on the stack and copied there.
        @inline(__always)
        init(key: String, value: EventValue) {
            self.key = key
            self.value = value
            (prefix, isASCII, isValidKey) = withUTF8Bytes(of: key, Self.facts)
        }

        private static func facts(_ utf8: UnsafeBufferPointer<UInt8>) -> (UInt64, Bool, Bool) {
            var prefix: UInt64 = 0
            var union: UInt8 = 0
            var control = false
            for (index, byte) in utf8.enumerated() {
                if index < 8 { prefix |= UInt64(byte) << (56 - 8 * index) }
                union |= byte
                control = control || EventEncoder.isControl(byte)
            }
            let isValid = !utf8.isEmpty && utf8.count <= EventValue.maximumKeyBytes && !control
            return (prefix, union < 0x80, isValid)
        }

        @inline(__always)
        func precedes(_ other: Entry) -> Bool {
            if isASCII, other.isASCII, prefix != other.prefix { return prefix < other.prefix }
            return key < other.key
        }
    }

    /// Sorts `entries` by key: an insertion sort that moves entries for the
    /// few keys events have, the standard library's sort past that.
    private static func sortByKey(_ entries: UnsafeMutableBufferPointer<Entry>) {
        guard entries.count > 16 else {
            guard let base = entries.baseAddress else { return }
            for index in entries.indices.dropFirst() {
                guard base[index].precedes(base[index - 1]) else { continue }
                let moving = (base + index).move()
                var hole = index
                while hole > 0, moving.precedes(base[hole - 1]) { hole -= 1 }
                (base + hole + 1).moveInitialize(from: base + hole, count: index - hole)
                (base + hole).initialize(to: moving)
            }
            return
        }
        var entries = entries
        entries.sort { $0.precedes($1) }
    }

    // MARK: - Scalars

    private mutating func writeString(_ string: String) {
        Self.appendJSONString(string, to: &bytes)
    }

    /// Appends `string` as a JSON string literal, escaped per RFC 8259.
    static func appendJSONString(_ string: String, to bytes: inout some JSONOutput) {
        var string = string
        string.withUTF8 { appendJSONString(UnsafeRawBufferPointer($0), to: &bytes) }
    }

    /// Appends UTF-8 `utf8` as a JSON string literal, escaped per RFC 8259.
    static func appendJSONString(_ utf8: UnsafeRawBufferPointer, to bytes: inout some JSONOutput) {
        bytes.append(UInt8(ascii: "\""))
        var runStart = 0
        var index = firstToEscape(in: utf8, from: 0)
        while index < utf8.count {
            let byte = utf8[index]
            bytes.appendBytes(UnsafeRawBufferPointer(rebasing: utf8[runStart..<index]))
            runStart = index + 1
            bytes.append(UInt8(ascii: "\\"))
            switch byte {
            case UInt8(ascii: "\""): bytes.append(UInt8(ascii: "\""))
            case UInt8(ascii: "\\"): bytes.append(UInt8(ascii: "\\"))
            case 0x0A: bytes.append(UInt8(ascii: "n"))
            case 0x0D: bytes.append(UInt8(ascii: "r"))
            case 0x09: bytes.append(UInt8(ascii: "t"))
            case 0x08: bytes.append(UInt8(ascii: "b"))
            case 0x0C: bytes.append(UInt8(ascii: "f"))
            default:
                let hex: StaticString = "0123456789abcdef"
                bytes.append(UInt8(ascii: "u"))
                bytes.append(UInt8(ascii: "0"))
                bytes.append(UInt8(ascii: "0"))
                bytes.append(hex.utf8Start[Int(byte >> 4)])
                bytes.append(hex.utf8Start[Int(byte & 0xF)])
            }
            index = firstToEscape(in: utf8, from: runStart)
        }
        bytes.appendBytes(UnsafeRawBufferPointer(rebasing: utf8[runStart...]))
        bytes.append(UInt8(ascii: "\""))
    }

    /// The index of the first byte at or after `start` that JSON escapes (a
    /// control character, `"` or `\`), or `utf8.count`. Eight bytes at a
    /// time while none of them is one: ids and names rarely hold any.
    @inline(__always)
    static func firstToEscape(in utf8: UnsafeRawBufferPointer, from start: Int) -> Int {
        var index = start
        while index + 8 <= utf8.count, !mayNeedEscaping(utf8.loadUnaligned(fromByteOffset: index, as: UInt64.self)) {
            index += 8
        }
        while index < utf8.count {
            let byte = utf8[index]
            if byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { return index }
            index += 1
        }
        return index
    }

    /// False only when none of the eight bytes of `word` is below 0x20, `"`
    /// or `\` (bitwise tests on all eight at once; true when one is).
    @inline(__always)
    static func mayNeedEscaping(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highBits: UInt64 = 0x8080_8080_8080_8080
        let below20 = (word &- ones &* 0x20) & ~word
        let quotes = word ^ (ones &* 0x22)
        let backslashes = word ^ (ones &* 0x5C)
        let isQuote = (quotes &- ones) & ~quotes
        let isBackslash = (backslashes &- ones) & ~backslashes
        return (below20 | isQuote | isBackslash) & highBits != 0
    }

    private mutating func writeInt(_ int: Int) {
        if int == 0 {
            bytes.append(UInt8(ascii: "0"))
            return
        }
        var magnitude = int.magnitude
        if int < 0 { bytes.append(UInt8(ascii: "-")) }
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes ≥ 20 digits
        let count = withUnsafeMutableBytes(of: &digits) { raw -> Int in
            var count = 0
            while magnitude > 0 {
                raw[count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            }
            for index in stride(from: count - 1, through: 0, by: -1) { bytes.append(raw[index]) }
            return count
        }
        _ = count
    }
}

extension SpoolError {
    /// The same error with `component` put in front of its event problem's
    /// path.
    func prefixed(with component: String) -> SpoolError {
        guard case .invalidEvent(let problem) = self else { return self }
        return .invalidEvent(problem.prefixed(with: component))
    }
}

extension SpoolError.EventProblem {
    /// The same problem with `component` put in front of its path.
    ///
    /// Exhaustive on purpose: a new case with a path must be added here.
    func prefixed(with component: String) -> SpoolError.EventProblem {
        switch self {
        case .invalidKey(let path): return .invalidKey(path: component + path)
        case .nonFiniteNumber(let path): return .nonFiniteNumber(path: component + path)
        case .nestingTooDeep(let path, let limit): return .nestingTooDeep(path: component + path, limit: limit)
        case .dateOutOfRange(let path): return .dateOutOfRange(path: component + path)
        case .emptyName, .nameTooLong, .invalidName, .tooLarge: return self
        }
    }
}
