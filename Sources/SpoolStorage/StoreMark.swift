import Foundation

/// The log's high-water mark, kept outside the database in a small file
/// beside it (`<database>-mark`): the highest position committed to this
/// file, and which file that was.
///
/// What the database says it committed (`log_head`) goes with the
/// database: a WAL deleted after a kill takes the commits since the last
/// checkpoint with it, `log_head` included, and the file then looks whole.
/// This file does not: each commit raises it (after the commit, so it never
/// claims more than was committed), and at open a mark above the file's
/// head counts events that were committed and are gone. It is rewritten in
/// place, 64 bytes of text anyone can `cat`:
///
/// ```
/// spool-mark 1 file 41d9a3f0c2b1e000 head 00000000000000004711
/// ```
///
/// `file` is the database's ``Connection/fileIdentity()``: a mark left by
/// another file at the same path (the app deleted the database but not the
/// mark) is ignored. It is not synced: after a power cut it may be behind
/// the database, never ahead of what was committed, so it can miss a loss
/// but never invent one.
///
/// Its descriptor also serves as the lock that keeps two processes from
/// opening and salvaging the file at once (`flock`, held only while
/// opening).
package final class StoreMark: Sendable {
    /// What the mark says.
    package struct Value: Sendable, Hashable {
        package var identity: UInt64
        package var head: Int64

        package init(identity: UInt64, head: Int64) {
            self.identity = identity
            self.head = head
        }
    }

    /// The mark's file.
    package let path: String
    /// Its descriptor; -1 once ``close()`` ran.
    private let descriptor: Protected<Int32>

    private static let size = 64

    /// Opens (creating with mode 0600) the mark of the database at
    /// `databasePath`; nil when it cannot (a location that cannot be
    /// written: opening the database fails there too).
    package init?(databasePath: String) {
        path = databasePath + "-mark"
        let opened = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard opened >= 0 else { return nil }
        descriptor = Protected(opened)
    }

    deinit {
        close()
    }

    /// Closes the mark's file now, rather than when its last holder lets go
    /// of it (the engine's `close()` returns with no file open); reading and
    /// writing it do nothing from then on.
    package func close() {
        descriptor.withLock { descriptor in
            guard descriptor >= 0 else { return }
            Foundation.close(descriptor)
            descriptor = -1
        }
    }

    /// The mark, or nil when there is none yet or it cannot be read.
    package func read() -> Value? {
        var bytes = (
            0 as UInt64, 0 as UInt64, 0 as UInt64, 0 as UInt64, 0 as UInt64, 0 as UInt64, 0 as UInt64, 0 as UInt64
        )
        let read = descriptor.withLock { descriptor in
            withUnsafeMutableBytes(of: &bytes) { pread(descriptor, $0.baseAddress, Self.size, 0) }
        }
        return withUnsafeBytes(of: &bytes) { buffer -> Value? in
            guard read == Self.size,
                buffer.prefix(Self.prefix.count).elementsEqual(Self.prefix),
                buffer[Self.identityRange.upperBound..<Self.headRange.lowerBound].elementsEqual(Self.separator),
                let identity = Self.number(buffer[Self.identityRange], radix: 16),
                let head = Self.number(buffer[Self.headRange], radix: 10), head <= UInt64(Int64.max)
            else { return nil }
            return Value(identity: identity, head: Int64(head))
        }
    }

    /// Writes `value` over the mark (one `pwrite`, not synced).
    package func write(_ value: Value) {
        var bytes = [UInt8](repeating: UInt8(ascii: " "), count: Self.size)
        bytes.replaceSubrange(0..<Self.prefix.count, with: Self.prefix)
        Self.put(value.identity, radix: 16, into: &bytes, Self.identityRange)
        bytes.replaceSubrange(Self.identityRange.upperBound..<Self.headRange.lowerBound, with: Self.separator)
        Self.put(UInt64(max(0, value.head)), radix: 10, into: &bytes, Self.headRange)
        bytes[Self.size - 1] = UInt8(ascii: "\n")
        // A mark that cannot be written costs no data: the next open only
        // sees less of what a lost WAL took with it.
        descriptor.withLock { descriptor in _ = pwrite(descriptor, bytes, bytes.count, 0) }
    }

    // MARK: - The layout

    private static let prefix = Array("spool-mark 1 file ".utf8)
    private static let separator = Array(" head ".utf8)
    /// 16 hexadecimal digits, then 20 decimal ones, zero-padded.
    private static let identityRange = 18..<34
    private static let headRange = 40..<60

    private static func number(_ digits: some Collection<UInt8>, radix: UInt64) -> UInt64? {
        var value: UInt64 = 0
        for byte in digits {
            let digit: UInt64
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt64(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f") where radix == 16: digit = UInt64(byte - UInt8(ascii: "a")) + 10
            default: return nil
            }
            let (shifted, overflow) = value.multipliedReportingOverflow(by: radix)
            guard !overflow else { return nil }
            value = shifted + digit
        }
        return value
    }

    private static func put(_ value: UInt64, radix: UInt64, into bytes: inout [UInt8], _ range: Range<Int>) {
        var rest = value
        for index in range.reversed() {
            let digit = UInt8(rest % radix)
            bytes[index] = digit < 10 ? UInt8(ascii: "0") + digit : UInt8(ascii: "a") + digit - 10
            rest /= radix
        }
    }

    /// Raises the mark to `head` for the file named `identity`, after a
    /// commit: one read and at most one write of 64 bytes. Another process
    /// sharing the file raises it too; a mark already at or past `head` is
    /// left, and so is a mark that names another file: another process put
    /// a fresh file at the path (a salvage), and this one has the old file
    /// open.
    ///
    /// - Returns: false when the mark names another file.
    @discardableResult
    package func advance(to head: Int64, identity: UInt64) -> Bool {
        let current = read()
        if let current, current.identity != identity { return false }
        if let current, current.head >= head { return true }
        write(Value(identity: identity, head: head))
        return true
    }

    /// Holds the open lock (waits while another process holds it).
    package func lock() {
        // Not under `descriptor`'s lock: this waits for another process.
        let descriptor = descriptor.withLock { $0 }
        while flock(descriptor, LOCK_EX) != 0 && errno == EINTR {}
    }

    /// Releases the open lock.
    package func unlock() {
        descriptor.withLock { descriptor in _ = flock(descriptor, LOCK_UN) }
    }
}
