/// What an event's sealed value holds once opened (the `sealed` columns of
/// `events` and `dead_letters`): its parameters' JSON; or, for a message
/// with a target (a group's id, an alias's previous user id), a zero byte,
/// the target's length in bytes (4 bytes, big-endian), its UTF-8 bytes, then
/// the parameters' JSON. JSON never starts with a zero byte.
package enum SealedEventValue {
    /// The plaintext of an event with `target`.
    package static func joining(target: String, parameters: UnsafeRawBufferPointer) -> [UInt8] {
        let target = Array(target.utf8)
        var plain: [UInt8] = [0]
        plain.reserveCapacity(5 + target.count + parameters.count)
        withUnsafeBytes(of: UInt32(clamping: target.count).bigEndian) { plain.append(contentsOf: $0) }
        plain.append(contentsOf: target)
        plain.append(contentsOf: parameters)
        return plain
    }

    /// Where the target (nil: none) and the parameters sit in `plain`; nil
    /// when it starts with a zero byte but is too short for what it says.
    package static func split(_ plain: UnsafeRawBufferPointer) -> (target: Range<Int>?, parameters: Range<Int>)? {
        guard plain.first == 0 else { return (nil, 0..<plain.count) }
        guard plain.count >= 5 else { return nil }
        let count = plain[1..<5].reduce(0) { $0 << 8 | Int($1) }
        guard plain.count >= 5 + count else { return nil }
        return (5..<(5 + count), (5 + count)..<plain.count)
    }
}
