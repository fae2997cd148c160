import Foundation
import Testing

@testable import SpoolStorage

/// Event ids: UUID version 7, formatted by hand.
struct EventIDTests {
    @Test func idsAreTimeOrderedVersion7() throws {
        var random = FastRandom(seed: 42)
        let id = EventID.make(milliseconds: 1_700_000_000_123, random: random.next(), random.next())
        #expect(id.count == 36)
        #expect(Array(id)[14] == "7")
        #expect("89ab".contains(Array(id)[19]))
        #expect(EventID.milliseconds(of: id) == 1_700_000_000_123)
        #expect(UUID(uuidString: id) != nil)
        let later = EventID.make(milliseconds: 1_700_000_000_124, random: 0, 0)
        let earlier = EventID.make(milliseconds: 1_700_000_000_123, random: .max, .max)
        #expect(earlier < later)
    }

    @Test("an id's digits are Foundation's UUID string of the same 16 bytes, in lowercase")
    func idsMatchFoundationsFormatting() {
        var random = FastRandom(seed: 7)
        let edges: [(UInt64, UInt64, UInt64)] = [
            (0, 0, 0), (281_474_976_710_655, .max, .max), (0xABCD_EF01_2345, 0x9A, 0),
        ]
        let randomized = (0..<2_000).map { _ in (random.next() >> 16, random.next(), random.next()) }
        for (milliseconds, high, low) in edges + randomized {
            let id = EventID.make(milliseconds: milliseconds, random: high, low)
            let upper = (milliseconds << 16) | 0x7000 | (high & 0x0FFF)
            let lower = (low & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000
            let bytes = (0..<16).map { UInt8(truncatingIfNeeded: ($0 < 8 ? upper : lower) >> (56 - 8 * ($0 % 8))) }
            let uuid = UUID(
                uuid: (
                    bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9],
                    bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
                ))
            #expect(id == uuid.uuidString.lowercased(), "\(milliseconds) \(high) \(low)")
            if id != uuid.uuidString.lowercased() { return }
        }
    }
}
