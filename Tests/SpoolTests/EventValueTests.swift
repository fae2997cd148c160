import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

struct EventValueTests {
    @Test func literalsAndAccessors() {
        let value: EventValue = ["s": "text", "i": 3, "d": 2.5, "b": true, "n": nil, "a": [1, "x"], "o": ["k": 1]]
        guard case .object(let object) = value else {
            Issue.record("not an object")
            return
        }
        #expect(object["s"]?.stringValue == "text")
        #expect(object["i"]?.intValue == 3)
        #expect(object["i"]?.doubleValue == 3, "ints widen to doubles")
        #expect(object["d"]?.doubleValue == 2.5)
        #expect(object["b"]?.boolValue == true)
        #expect(object["n"] == .null)
        #expect(object["s"]?.intValue == nil && object["i"]?.stringValue == nil && object["s"]?.boolValue == nil)
    }

    @Test func codableRoundTripsWithDatesAsStrings() throws {
        let date = Date(timeIntervalSince1970: 1_764_411_330.123)
        let value: EventValue = ["when": .date(date), "list": [1, 2.5, "x", true, nil], "nested": ["deep": ["a": 1]]]
        let data = try JSONEncoder().encode(value)
        let decoded = try JSONDecoder().decode(EventValue.self, from: data)
        #expect(decoded == value.delivered)
        guard case .object(let object) = decoded else {
            Issue.record("not an object")
            return
        }
        #expect(object["when"] == .string("2025-11-29T10:15:30.123Z"))
    }

    @Test func codableRejectsDatesOutsideFourDigitYears() throws {
        for seconds in [Double.nan, .infinity, 253_402_300_800, -62_167_219_200.001] {
            #expect(throws: EncodingError.self, "\(seconds)") {
                _ = try JSONEncoder().encode(EventValue.date(Date(timeIntervalSince1970: seconds)))
            }
        }
        let data = try JSONEncoder().encode(EventValue.date(EventValue.latestDate))
        #expect(String(decoding: data, as: UTF8.self) == #""9999-12-31T23:59:59.999Z""#)
        // `delivered` has no error to give: it clamps to the nearer end.
        #expect(EventValue.date(Date(timeIntervalSince1970: 1e17)).delivered == "9999-12-31T23:59:59.999Z")
        #expect(EventValue.date(Date(timeIntervalSince1970: .nan)).delivered == "0000-01-01T00:00:00.000Z")
    }

    @Test func theReaderRejectsMalformedJSON() throws {
        for bad in [
            "", "{", #"{"a":}"#, #"{"a":1,}"#, "[1 2]", #""unterminated"#, "nul", #"{"a":"\x"}"#, "{} trailing",
        ] {
            #expect(throws: JSONReader.Failure.self, "\(bad)") { _ = try JSONReader.parse(bad) }
        }
        let parsed = try JSONReader.parse(#" {"a" : [ 1 , -2.5e3 , "\u00e9\ud83d\ude00" ] } "#)
        #expect(parsed == .object(["a": [1, -2500.0, "é😀"]]))
    }

    @Test func theReaderTurnsUnpairedSurrogatesIntoReplacementCharacters() throws {
        // A high surrogate followed by an escape that is not a low one: an
        // unchecked decoder underflows a UInt32 here and traps.
        #expect(try JSONReader.parse(#""\ud800\u0041""#) == "\u{FFFD}A")
        #expect(try JSONReader.parse(#""\ud800\ud83d\ude00""#) == "\u{FFFD}😀")
        #expect(try JSONReader.parse(#""\ud800x""#) == "\u{FFFD}x")
        #expect(try JSONReader.parse(#""\udc00\ud800""#) == "\u{FFFD}\u{FFFD}")
        #expect(try JSONReader.parse(#""\ud800\n""#) == "\u{FFFD}\n")
        #expect(throws: JSONReader.Failure.self) { _ = try JSONReader.parse(#""\ud800\u00""#) }
    }
}
