import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Conversions that trap when done unchecked (a Double to Int64, a huge
/// literal to Int): every input gets a defined answer.
struct NumericConversionTests {
    static let earliest = "0000-01-01T00:00:00.000Z"
    static let latest = "9999-12-31T23:59:59.999Z"

    @Test("the formatter is total: every Double clamps into four-digit years, never traps")
    func theFormatterClampsEveryDouble() {
        let cases: [(Double, String)] = [
            (.nan, Self.earliest),
            (.infinity, Self.latest),
            (-.infinity, Self.earliest),
            (.greatestFiniteMagnitude, Self.latest),
            (-.greatestFiniteMagnitude, Self.earliest),
            (1e17, Self.latest),
            (-1e17, Self.earliest),
            (9.3e15, Self.latest),
            (-9.3e15, Self.earliest),
            (1e13, Self.latest),
            (-1e13, Self.earliest),
            (253_402_300_800, Self.latest),
            (253_402_300_799.9995, Self.latest),  // would round into year 10000
            (-62_167_219_200.0005, Self.earliest),  // would round into year -0001
            (-62_167_219_201, Self.earliest),
            (.leastNonzeroMagnitude, "1970-01-01T00:00:00.000Z"),
            (-.leastNonzeroMagnitude, "1970-01-01T00:00:00.000Z"),
            (-0.0, "1970-01-01T00:00:00.000Z"),
        ]
        for (seconds, expected) in cases {
            #expect(ISO8601Milliseconds.string(from: Date(timeIntervalSince1970: seconds)) == expected, "\(seconds)")
        }
        // Any bit pattern at all: 24 bytes in the fixed shape, a four-digit year.
        var random = FastRandom(seed: 8)
        for _ in 0..<20_000 {
            let seconds = Double(bitPattern: random.next())
            let string = ISO8601Milliseconds.string(from: Date(timeIntervalSince1970: seconds))
            #expect(isISOMilliseconds(string), "\(seconds): \(string)")
        }
    }

    @Test("dates: the exact edges of four-digit years, and the half millisecond past each")
    func theDateRangeEdges() throws {
        func encoded(_ seconds: Double) throws(SpoolError) -> String {
            try EventEncoder.encode(["d": .date(Date(timeIntervalSince1970: seconds))])
        }
        #expect(EventValue.earliestDate.timeIntervalSince1970 == -62_167_219_200)
        #expect(EventValue.latestDate.timeIntervalSince1970 == 253_402_300_799.999)
        #expect(try EventEncoder.encode(["d": .date(EventValue.earliestDate)]) == #"{"d":"\#(Self.earliest)"}"#)
        #expect(try EventEncoder.encode(["d": .date(EventValue.latestDate)]) == #"{"d":"\#(Self.latest)"}"#)

        // 9999-12-31T23:59:59.9995Z: the nearest double (…799.99951171875)
        // times 1000 is exactly …799999.5, which rounds away from 1970 into
        // year 10000: rejected. The double just below rounds to .999.
        let halfPast = 253_402_300_799.9995
        #expect(Date(timeIntervalSince1970: halfPast).timeIntervalSince1970 == halfPast)
        #expect(halfPast * 1000 == 253_402_300_799_999.5)
        #expect(throws: SpoolError.invalidEvent(.dateOutOfRange(path: ".d"))) { try encoded(halfPast) }
        #expect(try encoded(halfPast.nextDown) == #"{"d":"\#(Self.latest)"}"#)
        #expect(throws: SpoolError.invalidEvent(.dateOutOfRange(path: ".d"))) { try encoded(253_402_300_800) }

        // The same at the start: half a millisecond before year 0000 rounds
        // into year -0001.
        let halfBefore = -62_167_219_200.0005
        #expect(Date(timeIntervalSince1970: halfBefore).timeIntervalSince1970 == halfBefore)
        #expect(halfBefore * 1000 == -62_167_219_200_000.5)
        #expect(throws: SpoolError.invalidEvent(.dateOutOfRange(path: ".d"))) { try encoded(halfBefore) }
        #expect(try encoded(halfBefore.nextUp) == #"{"d":"\#(Self.earliest)"}"#)
        #expect(throws: SpoolError.invalidEvent(.dateOutOfRange(path: ".d"))) { try encoded(-62_167_219_200.001) }

        // Inside the range, Foundation's own dates. distantPast is 0001-01-01
        // in the Julian calendar, two days earlier in ISO 8601's Gregorian one.
        #expect(try encoded(Date.distantPast.timeIntervalSince1970) == #"{"d":"0000-12-30T00:00:00.000Z"}"#)
        #expect(try encoded(Date.distantFuture.timeIntervalSince1970) == #"{"d":"4001-01-01T00:00:00.000Z"}"#)

        // The message names the range, as the limits define it.
        let message = SpoolError.EventProblem.dateOutOfRange(path: ".d").description
        #expect(message.contains(".d") && message.contains(Self.earliest) && message.contains(Self.latest))
        #expect(ISO8601Milliseconds.string(from: EventValue.earliestDate) == Self.earliest)
        #expect(ISO8601Milliseconds.string(from: EventValue.latestDate) == Self.latest)
    }

    @Test("the reader: integers past Int read as doubles, numbers past Double are a failure")
    func theReaderReadsNumbersOfAnySizeWithoutTrapping() throws {
        let cases: [(String, EventValue)] = [
            ("9223372036854775807", .int(.max)),
            ("-9223372036854775808", .int(.min)),
            ("9223372036854775808", .double(9_223_372_036_854_775_808)),
            ("99999999999999999999", .double(1e20)),
            ("-99999999999999999999", .double(-1e20)),
            ("1" + String(repeating: "0", count: 308), .double(1e308)),
            ("1.7976931348623157e+308", .double(.greatestFiniteMagnitude)),
            ("5e-324", .double(.leastNonzeroMagnitude)),
            ("1e-400", .double(0)),
            ("-0", .int(0)),
            ("0.5E+2", .double(50)),
        ]
        for (text, expected) in cases {
            #expect(try JSONReader.parse(text) == expected, "\(text)")
        }
        let negativeZero = try JSONReader.parse("-0.0").doubleValue
        #expect(negativeZero == 0 && negativeZero?.sign == .minus)
        // Past Double: no EventValue can carry it (the encoder rejects infinity).
        for text in ["1e400", "-1e400", "1" + String(repeating: "0", count: 400), "[1e309]"] {
            #expect(throws: JSONReader.Failure.self, "\(text)") { _ = try JSONReader.parse(text) }
        }
        // Not RFC 8259 numbers, though Swift's parsers take some of them.
        for text in [
            "+1", ".5", "1.", "01", "-01", "-", "1e", "1e+", "--1", "1-2", "1.5e3.2", "-.5", "0x10", "1e5e5",
            "Infinity", "-Infinity", "NaN", "inf", "nan",
        ] {
            #expect(throws: JSONReader.Failure.self, "\(text)") { _ = try JSONReader.parse(text) }
        }
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS.sssZ` back to milliseconds since 1970, by
    /// counting leap years rather than by the formatter's era arithmetic, so
    /// the two check each other. Nil for anything else.
    static func millisecondsSince1970(iso string: String) -> Int64? {
        guard isISOMilliseconds(string) else { return nil }
        let bytes = Array(string.utf8)
        func number(_ range: Range<Int>) -> Int64 {
            bytes[range].reduce(0) { $0 * 10 + Int64($1 - UInt8(ascii: "0")) }
        }
        let (year, month, day) = (number(0..<4), number(5..<7), number(8..<10))
        let (hour, minute, second, millisecond) = (number(11..<13), number(14..<16), number(17..<19), number(20..<23))
        let isLeap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let monthDays: [Int64] = [31, isLeap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard (1...12).contains(month), (1...monthDays[Int(month - 1)]).contains(day), hour < 24, minute < 60,
            second < 60
        else { return nil }
        // Days in years 0000...year-1 (year 0000 is a leap year).
        let daysBeforeYear = 365 * year + (year + 3) / 4 - (year + 99) / 100 + (year + 399) / 400
        let days = daysBeforeYear + monthDays.prefix(Int(month - 1)).reduce(0, +) + day - 1 - 719_528
        return ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millisecond
    }
}

/// Configuration values from a host app that an unchecked conversion traps on.
struct ConfigurationEdgeTests {
    @Test("a retention bound of 0 or Int.min is one event, not a crash", arguments: [0, -1, Int.min])
    func nonPositiveRetention(_ maximum: Int) async throws {
        let engine = EventEngine(configuration: EngineConfiguration(maximumRetainedEvents: maximum))
        #expect(try engine.record("before_start") == .queuedUntilSessionStart)
        #expect(try engine.record("second") == .queuedUntilSessionStart)
        try await engine.start()
        try engine.record("after_start")
        try await engine.settle()
        await engine.close()
    }

    @Test("an infinite or huge request timeout is clamped, not a trap", arguments: [Double.infinity, 1e300, 9.3e15])
    func hugeRequestTimeout(_ timeout: Double) async throws {
        let dispatcher = DefaultEventDispatcher(requestTimeout: timeout)
        #expect(dispatcher.requestTimeout == 86_400)
        // A request to a closed loopback port answers at once.
        let outcome = await dispatcher.dispatch(Data("{}".utf8), to: URL(string: "http://127.0.0.1:9/x")!)
        #expect(!outcome.isSuccess)
    }

    @Test("timer delays are clamped to zero through a year instead of trapping")
    func timerDelays() async throws {
        #expect(SystemClock.clamped(.nan) == 0)
        #expect(SystemClock.clamped(-1) == 0)
        #expect(SystemClock.clamped(.infinity) == 365 * 86_400)
        #expect(SystemClock.clamped(1e300) == 365 * 86_400)
        #expect(SystemClock.clamped(1.5) == 1.5)
        let fired = Protected(0)
        let queue = DispatchQueue(label: "spool.test.timers")
        for delay in [Double.nan, -1, .infinity, 1e300] {
            SystemClock().schedule(after: delay, on: queue) { fired.withLock { $0 += 1 } }
        }
        #expect(try await waitUntil { fired.withLock { $0 } == 2 })
        #expect(EventID.milliseconds(since1970: -5) == 0)
        #expect(EventID.milliseconds(since1970: .infinity) == 281_474_976_710_655)
    }
}
