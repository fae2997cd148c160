import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Conversions that used to trap (a Double to Int64, a huge literal to Int):
/// every input gets a defined answer.
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
            #expect(Self.hasISOShape(string), "\(seconds): \(string)")
        }
    }

    /// `YYYY-MM-DDTHH:MM:SS.sssZ`: digits where digits go, the separators in
    /// place, nothing more.
    static func hasISOShape(_ string: String) -> Bool {
        let shape = Array("dddd-dd-ddTdd:dd:dd.dddZ".utf8)
        let bytes = Array(string.utf8)
        guard bytes.count == shape.count else { return false }
        return zip(bytes, shape).allSatisfy { byte, expected in
            expected == UInt8(ascii: "d") ? (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) : byte == expected
        }
    }
}
