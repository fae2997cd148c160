import Testing

@testable import Spool
@testable import SpoolStorage

/// Keys are sorted by their first eight bytes when that decides, and
/// checked byte by byte: these tests put the bytes that matter before, at
/// and past the eighth.
struct EventEncoderKeyTests {
    /// Keys that share their first eight bytes, differ in length, or hold
    /// non-ASCII text (a combining mark after an ASCII letter sorts by the
    /// composed letter) still come out in String order.
    @Test func keysSortLikeStringsPastTheirFirstEightBytes() throws {
        let stems = ["", "a", "ab", "cat", "category", "categorY", "category_", "zzzzzzzzzz"]
        let tails = ["", "a", "b", "A", "_", "~", "é", "\u{0307}", "ß", "😀", "ab\u{0307}", "ac", "0"]
        var random = FastRandom(seed: 11)
        for round in 0..<200 {
            var object: [String: EventValue] = [:]
            while object.count < 1 + round % 24 {
                let stem: String = stems[Int(random.next() % UInt64(stems.count))]
                let first: String = tails[Int(random.next() % UInt64(tails.count))]
                let second: String = tails[Int(random.next() % UInt64(tails.count))]
                let key = stem + first + second
                if !key.isEmpty { object[key] = .int(0) }
            }
            // Split as bytes: a key may start with a combining mark, which
            // joins the quote before it into one Character.
            let members = Array(try EventEncoder.encode(object).utf8).dropFirst().dropLast()
            let keys = members.split(separator: UInt8(ascii: ",")).map {
                String(decoding: $0.dropFirst().prefix { $0 != UInt8(ascii: "\"") }, as: UTF8.self)
            }
            #expect(keys == object.keys.sorted(), "round \(round)")
        }
    }

    /// A control character (below 0x20, or 0x7F) anywhere in a key of any
    /// length is an invalid key; the bytes around the control range are not.
    @Test func controlCharactersAreFoundAtEveryOffset() throws {
        for length in 1...20 {
            for offset in 0..<length {
                for scalar: Unicode.Scalar in ["\u{0}", "\u{1F}", "\u{7F}"] {
                    var key = Array(repeating: Unicode.Scalar("k"), count: length)
                    key[offset] = scalar
                    let text = String(String.UnicodeScalarView(key))
                    #expect(throws: SpoolError.invalidEvent(.invalidKey(path: "." + text.debugDescription))) {
                        try EventEncoder.encode([text: 1])
                    }
                }
                for scalar: Unicode.Scalar in [" ", "~", "\u{80}", "é"] {
                    var key = Array(repeating: Unicode.Scalar("k"), count: length)
                    key[offset] = scalar
                    let text = String(String.UnicodeScalarView(key))
                    #expect(try JSONReader.parseObject(try EventEncoder.encode([text: 1])) == [text: 1])
                }
            }
        }
    }
}
