/// Where JSON text is written byte by byte: a request body (`[UInt8]`) or the
/// encoder's ``ByteBuffer``. The escaping and date formatting are written
/// once, for both.
protocol JSONOutput {
    mutating func append(_ byte: UInt8)
    mutating func appendBytes(_ bytes: UnsafeRawBufferPointer)
}

extension JSONOutput {
    /// Appends `value` as a JSON number: its digits, put together on the
    /// stack and appended at once.
    mutating func append(integer value: Int64) {
        var magnitude = value.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes ≥ 20 digits and a sign
        withUnsafeMutableBytes(of: &digits) { raw in
            var start = raw.count
            repeat {
                start -= 1
                raw[start] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            if value < 0 {
                start -= 1
                raw[start] = UInt8(ascii: "-")
            }
            appendBytes(UnsafeRawBufferPointer(rebasing: raw[start...]))
        }
    }
}

extension Array: JSONOutput where Element == UInt8 {
    @inline(__always)
    mutating func appendBytes(_ bytes: UnsafeRawBufferPointer) {
        append(contentsOf: bytes)
    }

    /// Appends the bytes of `literal`: half the cost of appending a
    /// string's `utf8` view, for the fixed parts of a request body.
    @inline(__always)
    mutating func append(literal: StaticString) {
        appendBytes(UnsafeRawBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
    }
}

/// A growable byte buffer that checks its capacity once per write: what
/// ``EventEncoder`` writes an event's parameters into, on the caller's
/// thread of every `record`.
///
/// Copies share one allocation: its owner calls ``deallocate()`` exactly
/// once, when done with every copy.
struct ByteBuffer: JSONOutput {
    private(set) var base: UnsafeMutablePointer<UInt8>
    private(set) var count = 0
    private var capacity: Int

    init(capacity: Int) {
        self.capacity = max(capacity, 16)
        base = .allocate(capacity: self.capacity)
    }

    func deallocate() {
        base.deallocate()
    }

    /// The bytes written so far.
    var bytes: UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: base, count: count)
    }

    @inline(__always)
    mutating func append(_ byte: UInt8) {
        if count == capacity { grow(toHold: count + 1) }
        base[count] = byte
        count += 1
    }

    /// Keys, short strings and numbers are a few bytes long: up to 16 are
    /// copied with two overlapping loads and stores, cheaper than calling
    /// `memmove`.
    @inline(__always)
    mutating func appendBytes(_ bytes: UnsafeRawBufferPointer) {
        guard let source = bytes.baseAddress else { return }
        let length = bytes.count
        if count + length > capacity { grow(toHold: count + length) }
        let target = UnsafeMutableRawPointer(base + count)
        switch length {
        case 8...16:
            target.storeBytes(of: source.loadUnaligned(as: UInt64.self), as: UInt64.self)
            (target + length - 8).storeBytes(
                of: (source + length - 8).loadUnaligned(as: UInt64.self), as: UInt64.self)
        case 4..<8:
            target.storeBytes(of: source.loadUnaligned(as: UInt32.self), as: UInt32.self)
            (target + length - 4).storeBytes(
                of: (source + length - 4).loadUnaligned(as: UInt32.self), as: UInt32.self)
        default:
            target.copyMemory(from: source, byteCount: length)
        }
        count += length
    }

    private mutating func grow(toHold needed: Int) {
        let newCapacity = max(needed, capacity * 2)
        let newBase = UnsafeMutablePointer<UInt8>.allocate(capacity: newCapacity)
        newBase.update(from: base, count: count)
        base.deallocate()
        (base, capacity) = (newBase, newCapacity)
    }
}
