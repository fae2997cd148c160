import Foundation
import Testing

@testable import Spool

/// The zlib-backed gzip helper: valid members, round trips, and refusal of
/// what is not gzip. (The collector process decodes Spool's bodies with
/// Python's gzip module in the upload tests.)
struct GzipTests {
    @Test("compress writes one gzip member that inflates back to the same bytes")
    func roundTrip() throws {
        var text = ""
        for index in 0..<2_000 {
            text += #"{"id":"0190f3a2-7c1e-7b44-9a55-\#(index)","name":"screen_view","parameters":{"i":\#(index)}},"#
        }
        let input = Data(text.utf8)
        let compressed = try #require(Gzip.compress(input))
        #expect(Array(compressed.prefix(3)) == [0x1f, 0x8b, 0x08], "gzip magic and deflate")
        #expect(compressed.count * 5 < input.count, "event JSON compresses several-fold: \(compressed.count)")
        #expect(Gzip.decompress(compressed) == input)
    }

    @Test("an empty input is a valid 20-byte member, not an empty result")
    func emptyInput() throws {
        let compressed = try #require(Gzip.compress(Data()))
        #expect(compressed.count == 20)
        #expect(Gzip.decompress(compressed) == Data())
    }

    @Test("incompressible input still round-trips (the output bound holds)")
    func incompressible() throws {
        var generator = SystemRandomNumberGenerator()
        let input = Data((0..<100_000).map { _ in UInt8.random(in: 0...255, using: &generator) })
        let compressed = try #require(Gzip.compress(input))
        #expect(Gzip.decompress(compressed) == input)
    }

    @Test("decompress refuses what is not gzip, a truncated member, and output past its limit")
    func refusals() throws {
        #expect(Gzip.decompress(Data("{\"plain\":true}".utf8)) == nil)
        #expect(Gzip.decompress(Data()) == nil)
        let compressed = try #require(Gzip.compress(Data(repeating: UInt8(ascii: "x"), count: 100_000)))
        #expect(Gzip.decompress(compressed.prefix(compressed.count - 8)) == nil, "truncated")
        #expect(Gzip.decompress(compressed, limit: 1_000) == nil, "past the limit")
        // Two members in a row are one stream (RFC 1952).
        let two = try #require(Gzip.compress(Data("ab".utf8))) + (try #require(Gzip.compress(Data("cd".utf8))))
        #expect(Gzip.decompress(two) == Data("abcd".utf8))
    }
}
