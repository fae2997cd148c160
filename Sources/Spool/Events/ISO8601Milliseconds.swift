import Foundation

/// `YYYY-MM-DDTHH:MM:SS.sssZ` in UTC, formatted by hand from the calendar
/// fields (`ISO8601DateFormatter` costs about 1.7 µs a call on Linux).
///
/// The calendar is the proleptic Gregorian one ISO 8601 specifies, and the
/// year has exactly four digits, so only 0000-01-01T00:00:00.000Z through
/// 9999-12-31T23:59:59.999Z can be written (``EventValue/earliestDate`` and
/// ``EventValue/latestDate``). A date is first rounded to the nearest
/// millisecond (halves away from 1970); it is representable when that
/// millisecond is in the range.
enum ISO8601Milliseconds {
    /// 0000-01-01T00:00:00.000Z in milliseconds since 1970: 719 528 days before it.
    static let earliestMilliseconds: Int64 = -62_167_219_200_000
    /// 9999-12-31T23:59:59.999Z in milliseconds since 1970: one millisecond
    /// before 10000-01-01 (2 932 897 days after 1970).
    static let latestMilliseconds: Int64 = 253_402_300_799_999

    // Both bounds are below 2⁵³, so these doubles are exact.
    private static let earliest = Double(earliestMilliseconds)
    private static let latest = Double(latestMilliseconds)

    static func string(from date: Date) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(24)
        append(date, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The date to the nearest millisecond since 1970, or nil when that is
    /// outside the representable range (or the date is NaN or infinite).
    ///
    /// Rounding, not truncation: a date built from whole milliseconds is
    /// often a hair below them in binary floating point.
    @inline(__always)
    static func milliseconds(ifRepresentable date: Date) -> Int64? {
        let milliseconds = (date.timeIntervalSince1970 * 1000).rounded()
        // NaN fails both comparisons; in range, the conversion is exact.
        guard milliseconds >= earliest, milliseconds <= latest else { return nil }
        return Int64(milliseconds)
    }

    /// Appends the formatted date (without quotes) to `bytes`.
    ///
    /// Total: a date outside the range is clamped to its nearest end, and NaN
    /// to the earliest, so this never traps and never writes a five-digit
    /// year. It is meant for timestamps Spool takes itself (`Date()`, stored
    /// `recordedAt`); a date from a user is checked with
    /// ``milliseconds(ifRepresentable:)`` first, so it is rejected, not
    /// silently moved.
    static func append(_ date: Date, to bytes: inout some JSONOutput) {
        let milliseconds = (date.timeIntervalSince1970 * 1000).rounded()
        let clamped: Int64
        if milliseconds >= latest {
            clamped = latestMilliseconds
        } else if milliseconds >= earliest {
            clamped = Int64(milliseconds)
        } else {
            clamped = earliestMilliseconds  // also NaN
        }
        append(milliseconds: clamped, to: &bytes)
    }

    /// Appends the date `milliseconds` after 1970, which must be in
    /// `earliestMilliseconds...latestMilliseconds`: its 24 characters are
    /// put together on the stack and appended at once.
    static func append(milliseconds: Int64, to bytes: inout some JSONOutput) {
        let (days, millisecondOfDay) = floorDivide(milliseconds, 86_400_000)
        let (year, month, day) = civil(fromDays: days)
        let second = millisecondOfDay / 1000
        let millisecond = millisecondOfDay % 1000
        var text: (UInt64, UInt64, UInt64) = (0, 0, 0)
        withUnsafeMutableBytes(of: &text) { text in
            func put(_ value: Int64, at offset: Int) {
                text[offset] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: value / 10)
                text[offset + 1] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: value % 10)
            }
            put(year / 100, at: 0)
            put(year % 100, at: 2)
            text[4] = UInt8(ascii: "-")
            put(month, at: 5)
            text[7] = UInt8(ascii: "-")
            put(day, at: 8)
            text[10] = UInt8(ascii: "T")
            put(second / 3600, at: 11)
            text[13] = UInt8(ascii: ":")
            put(second / 60 % 60, at: 14)
            text[16] = UInt8(ascii: ":")
            put(second % 60, at: 17)
            text[19] = UInt8(ascii: ".")
            text[20] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: millisecond / 100)
            put(millisecond % 100, at: 21)
            text[23] = UInt8(ascii: "Z")
            bytes.appendBytes(UnsafeRawBufferPointer(text))
        }
    }

    private static func floorDivide(_ value: Int64, _ divisor: Int64) -> (Int64, Int64) {
        var quotient = value / divisor
        var remainder = value % divisor
        if remainder < 0 {
            quotient -= 1
            remainder += divisor
        }
        return (quotient, remainder)
    }

    /// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
    private static func civil(fromDays days: Int64) -> (Int64, Int64, Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
