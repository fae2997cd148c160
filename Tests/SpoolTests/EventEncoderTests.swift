import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

struct EventEncoderTests {
    @Test func encodesCanonicalJSON() throws {
        let json = try EventEncoder.encode([
            "z": 1, "a": "x\"y\\z\n\u{1}é😀", "m": 2.5, "t": true, "n": nil, "arr": [1, 2.0, "s"], "o": ["k": false],
            "big": .int(Int.max), "neg": -42, "tiny": 1e-7, "huge": 1e300,
        ])
        #expect(
            json
                == #"{"a":"x\"y\\z\n\u0001é😀","arr":[1,2.0,"s"],"big":9223372036854775807,"huge":1e+300,"m":2.5,"n":null,"neg":-42,"o":{"k":false},"t":true,"tiny":1e-07,"z":1}"#
        )
    }

    /// Keys come out in String order whatever the object's size: small
    /// objects and large ones are sorted by different code.
    @Test(arguments: [2, 12, 16, 17, 40, 300])
    func keysAreSortedAtEverySize(count: Int) throws {
        var random = FastRandom(seed: UInt64(count))
        var object: [String: EventValue] = [:]
        while object.count < count {
            let key = String(random.next() % 100_000) + (random.next() % 3 == 0 ? "é" : "")
            object[key] = .string(key)
        }
        let parsed = try JSONReader.parseObject(try EventEncoder.encode(object))
        #expect(parsed == object)
        let keys = try EventEncoder.encode(object).split(separator: ",").map { $0.split(separator: ":")[0] }
        #expect(keys.map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "{\"")) } == object.keys.sorted())
        // An invalid key sorted last is reported, after the others were
        // written.
        object["\u{7F}"] = 1
        #expect(throws: SpoolError.invalidEvent(.invalidKey(path: ".\"\\u{7F}\""))) { try EventEncoder.encode(object) }
    }

    @Test func datesAreISO8601WithMillisecondsInUTC() throws {
        let cases: [(Double, String)] = [
            (0, "1970-01-01T00:00:00.000Z"),
            (1_764_411_330.123, "2025-11-29T10:15:30.123Z"),
            (951_782_400.999, "2000-02-29T00:00:00.999Z"),
            (-1.5, "1969-12-31T23:59:58.500Z"),
            (253_402_300_799, "9999-12-31T23:59:59.000Z"),
        ]
        for (seconds, expected) in cases {
            #expect(ISO8601Milliseconds.string(from: Date(timeIntervalSince1970: seconds)) == expected)
        }
        // Agrees with Foundation's formatter.
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var random = FastRandom(seed: 7)
        for _ in 0..<1_000 {
            let milliseconds = Double(random.next() % 4_102_444_800_000)
            let date = Date(timeIntervalSince1970: milliseconds / 1000)
            #expect(ISO8601Milliseconds.string(from: date) == formatter.string(from: date))
        }
    }

    @Test func badInputGetsATypedErrorNamingTheProblem() throws {
        func expectInvalid(
            _ expected: SpoolError.EventProblem, _ name: String = "ok", _ parameters: [String: EventValue] = [:]
        ) {
            #expect(throws: SpoolError.invalidEvent(expected)) {
                try EventEncoder.validate(name: name)
                _ = try EventEncoder.encode(parameters)
            }
        }
        expectInvalid(.emptyName, "")
        expectInvalid(.nameTooLong(bytes: 257, limit: 256), String(repeating: "n", count: 257))
        expectInvalid(.invalidName("bad\nname"), "bad\nname")
        expectInvalid(.nonFiniteNumber(path: ".price"), "ok", ["price": .double(.nan)])
        expectInvalid(.nonFiniteNumber(path: ".list[1]"), "ok", ["list": [1, .double(.infinity)]])
        expectInvalid(.dateOutOfRange(path: ".when"), "ok", ["when": .date(Date(timeIntervalSince1970: .nan))])
        expectInvalid(
            .dateOutOfRange(path: ".items[2].at"), "ok",
            ["items": [1, 2, ["at": .date(Date(timeIntervalSince1970: 1e17))]]])
        expectInvalid(.invalidKey(path: #"."""#), "ok", ["": 1])
        expectInvalid(.invalidKey(path: ".outer" + #"."tab\tkey""#), "ok", ["outer": ["tab\tkey": 1]])
        var deep: EventValue = 1
        for _ in 0..<EventValue.maximumDepth { deep = [deep] }
        #expect(throws: SpoolError.self) { _ = try EventEncoder.encode(["deep": deep]) }
        var ok: EventValue = 1
        for _ in 0..<(EventValue.maximumDepth - 2) { ok = [ok] }
        #expect(throws: Never.self) { _ = try EventEncoder.encode(["ok": ok]) }
        let huge = String(repeating: "x", count: EventValue.maximumEncodedBytes)
        #expect(throws: SpoolError.self) { _ = try EventEncoder.encode(["huge": .string(huge)]) }
    }

    @Test func oneBadEventNeverCostsTheGoodOnesAroundIt() async throws {
        let engine = try await startedEngine()
        try engine.record("good_1")
        #expect(throws: SpoolError.invalidEvent(.nonFiniteNumber(path: ".x"))) {
            try engine.record("bad", parameters: ["x": .double(.infinity)])
        }
        #expect(throws: SpoolError.invalidEvent(.emptyName)) { try engine.record("") }
        try engine.record("good_2")
        try await engine.settle()
        #expect(try await engine.storedNames() == ["session_start", "good_1", "good_2"])
        await engine.close()
    }

    /// Extreme dates: eight of them trap an unchecked formatter (and with
    /// it the host process); the other two give years of six digits and
    /// more.
    static let extremeDates: [Double] = [
        .nan, .infinity, -.infinity, 1e17, -1e17, 9.3e15, -9.3e15, .greatestFiniteMagnitude, 1e13, -1e13,
    ]

    @Test("each extreme date is a typed error; the process lives and the good events around it are kept")
    func extremeDatesAreTypedErrorsThroughAStartedEngine() async throws {
        let engine = try await startedEngine()
        let listener = CollectingListener()
        engine.events.addObserver(listener)
        var good: [String] = []
        for (index, seconds) in Self.extremeDates.enumerated() {
            let date = EventValue.date(Date(timeIntervalSince1970: seconds))
            good.append("good_\(index)")
            try engine.record("good_\(index)", parameters: ["when": .date(Date())])
            #expect(throws: SpoolError.invalidEvent(.dateOutOfRange(path: ".when")), "\(seconds)") {
                try engine.record("bad", parameters: ["when": date])
            }
            await #expect(throws: SpoolError.invalidEvent(.dateOutOfRange(path: ".items[2].at")), "\(seconds)") {
                try await engine.recordDurably("bad", parameters: ["items": [1, 2, ["at": date]], "ok": 1])
            }
        }
        try engine.record("last")
        good.append("last")
        try await engine.settle()
        #expect(try await engine.storedNames() == ["session_start"] + good)
        #expect(listener.customNames == good)
        await engine.close()
    }

    /// Every edge of every value kind, then random names and parameter trees
    /// (bounded, seeded). Nothing crashes; each event either gets exactly the
    /// typed error an independent model of the encoder predicts (first error
    /// in key order, with its path), or is stored as valid JSON, reads back
    /// identical (dates as their ISO strings) and is delivered; the good
    /// events between the bad ones are all kept.
    @Test func fuzzRecordReadsBackIdentical() async throws {
        let seed = UInt64(Date().timeIntervalSince1970)
        var random = FastRandom(seed: seed)
        let engine = try await startedEngine()
        let listener = CollectingListener()
        engine.events.addObserver(listener)
        var events: [(name: String, parameters: [String: EventValue])] = []
        for value in Self.edgeValues {
            events.append(("edge", ["v": value]))
            events.append(("edge_nested", ["items": [1, 2, ["at": value]], "z": .date(Date())]))
            events.append(("good_neighbour", ["v": 1]))
        }
        for key in Self.edgeKeys {
            events.append(("edge_key", [key: 1, "m": ["inner": [key: .date(EventValue.latestDate)]]]))
            events.append(("good_neighbour", ["v": 2]))
        }
        for name in Self.edgeNames {
            events.append((name, ["v": 3]))
            events.append(("good_neighbour", ["v": 4]))
        }
        // Exactly at the size limit and one byte past it; then a size that
        // counts one of every kind of valid value.
        let fill = EventValue.maximumEncodedBytes - #"{"s":""}"#.utf8.count
        events.append(("size_at_limit", ["s": .string(String(repeating: "x", count: fill))]))
        events.append(("size_past_limit", ["s": .string(String(repeating: "x", count: fill + 1))]))
        events.append(("size_of_everything", ["a": .array(Self.validValues), "b": .string(Self.overLimitString)]))
        for _ in 0..<600 {
            let name = randomString(&random, maxLength: random.next() % 20 == 0 ? 300 : 24)
            events.append((name, randomObject(&random, depth: 1)))
        }

        var expected: [(name: String, parameters: [String: EventValue])] = []
        var rejected: Set<String> = []
        for (index, event) in events.enumerated() {
            let predicted = ExpectedEncoding.error(name: event.name, parameters: event.parameters)
            do {
                let outcome = try engine.record(event.name, parameters: event.parameters)
                #expect(outcome.isAccepted, "seed \(seed) #\(index)")
                #expect(
                    predicted == nil, "seed \(seed) #\(index): accepted; expected \(predicted.map { "\($0)" } ?? "")")
                expected.append((event.name, event.parameters.delivered))
                for (key, value) in event.parameters {
                    expectISOStrings(
                        value, delivered: expected[expected.count - 1].parameters[key], "seed \(seed) #\(index)")
                }
            } catch SpoolError.invalidEvent(let error) {
                #expect(error == predicted, "seed \(seed) #\(index)")
                rejected.insert(error.kind)
            }
        }
        #expect(
            rejected == [
                "emptyName", "nameTooLong", "invalidName", "invalidKey", "nonFiniteNumber", "nestingTooDeep",
                "dateOutOfRange", "tooLarge",
            ], "every kind of error came up (seed \(seed))")
        try await engine.settle()
        let stored = try await engine.query { try $0.readEvents(after: 1, limit: .max, now: 0) }
        #expect(stored.count == expected.count, "seed \(seed)")
        for (event, want) in zip(stored, expected) {
            #expect(event.name == want.name, "seed \(seed)")
            let parsed = try JSONReader.parseObject(event.parametersJSON)
            #expect(parsed == want.parameters, "seed \(seed): \(event.parametersJSON.prefix(300))")
        }
        let delivered = listener.received.withLock { $0 }.filter { $0.name != EventEngine.sessionStartEventName }
        #expect(delivered.map(\.name) == expected.map(\.name), "seed \(seed)")
        #expect(delivered.map(\.parameters) == expected.map(\.parameters), "seed \(seed)")
        // What Spool wrote is valid JSON to SQLite too.
        let invalid = try await engine.query {
            try $0.scalarInt("SELECT count(*) FROM events WHERE NOT json_valid(parameters)")
        }
        #expect(invalid == 0)
        #expect(!expected.isEmpty, "the fuzzer exercised both paths (seed \(seed))")
        await engine.close()
    }

    // MARK: - Edges

    static let hugeString = String(repeating: "é中😀\"\\\n\u{1}x", count: 16_384)  // 229 376 UTF-8 bytes
    static let overLimitString = String(repeating: "x", count: EventValue.maximumEncodedBytes)

    /// Nested containers, alternating arrays and objects, `count` deep.
    static func chain(_ count: Int) -> EventValue {
        var value: EventValue = .date(EventValue.earliestDate)
        for level in 0..<count { value = level % 2 == 0 ? [value] : ["k": value] }
        return value
    }

    static let edgeDates: [Double] =
        [
            EventValue.earliestDate.timeIntervalSince1970, EventValue.latestDate.timeIntervalSince1970,
            253_402_300_799.9995, (253_402_300_799.9995).nextDown, 253_402_300_800,
            -62_167_219_200.0005, (-62_167_219_200.0005).nextUp, -62_167_219_200.001,
            Date.distantPast.timeIntervalSince1970, Date.distantFuture.timeIntervalSince1970,
            .leastNonzeroMagnitude, -.leastNonzeroMagnitude, .leastNormalMagnitude, -0.0, 0, -.greatestFiniteMagnitude,
        ] + extremeDates

    static let edgeValues: [EventValue] =
        edgeDates.map { .date(Date(timeIntervalSince1970: $0)) } + [
            .date(Date.distantPast), .date(Date.distantFuture),
            .int(.min), .int(.max), .int(0), .int(-1),
            .double(.greatestFiniteMagnitude), .double(-.greatestFiniteMagnitude), .double(-0.0),
            .double(.leastNonzeroMagnitude), .double(-.leastNonzeroMagnitude), .double(.leastNormalMagnitude),
            .double(.nan), .double(.infinity), .double(-.infinity), .double(1e-7),
            .string(""), .string(hugeString), .string(overLimitString), .string(nonASCII), .string(controlCharacters),
            .array([]), .object([:]), .null, .bool(true), .bool(false),
            // The parameters object is level 1, so a chain under a key starts at 2.
            chain(EventValue.maximumDepth - 1), chain(EventValue.maximumDepth),
            .array([.string(hugeString), .string(hugeString), .string(hugeString), .string(hugeString)]),
        ]

    static let nonASCII = "é中😀\u{2028}\u{FEFF}e\u{301}🇺🇳"
    static let controlCharacters = String((0...0x1F).map { Character(Unicode.Scalar(UInt8($0))) }) + "\u{7F}\"\\/"

    /// One of each kind of valid value, at its edges.
    static let validValues: [EventValue] = [
        .date(EventValue.earliestDate), .date(EventValue.latestDate), .date(Date(timeIntervalSince1970: -0.0)),
        .int(.min), .int(.max), .double(.greatestFiniteMagnitude), .double(-0.0), .double(.leastNonzeroMagnitude),
        .string(""), .string(nonASCII), .string(controlCharacters), .bool(true), .bool(false), .null,
        .array([]), .object([:]), chain(3),
    ]

    static let edgeKeys: [String] = [
        "", String(repeating: "k", count: 256), String(repeating: "k", count: 257),
        String(repeating: "é", count: 128), String(repeating: "é", count: 128) + "k", "tab\tkey", "\u{7F}", "\u{0}",
        "é中😀", "\"\\",
    ]

    static let edgeNames: [String] = [
        "", String(repeating: "n", count: 256), String(repeating: "n", count: 257),
        String(repeating: "é", count: 128) + "n", "bad\nname", "\u{7F}", "é中😀",
    ]

    /// Each date in `value` was delivered as the ISO string of its nearest
    /// millisecond, checked by parsing the string back independently.
    private func expectISOStrings(_ value: EventValue, delivered: EventValue?, _ comment: String) {
        switch (value, delivered) {
        case (.date(let date), .string(let string)?):
            let milliseconds = NumericConversionTests.millisecondsSince1970(iso: string)
            #expect(milliseconds.map(Double.init) == (date.timeIntervalSince1970 * 1000).rounded(), "\(comment)")
        case (.array(let values), .array(let strings)?) where values.count == strings.count:
            for (value, string) in zip(values, strings) { expectISOStrings(value, delivered: string, comment) }
        case (.object(let values), .object(let strings)?) where values.count == strings.count:
            for (key, value) in values { expectISOStrings(value, delivered: strings[key], comment) }
        case (.date, _), (.array, _), (.object, _): Issue.record("delivered differs in shape: \(comment)")
        default: break
        }
    }

    // MARK: - Random values

    private func randomString(_ random: inout FastRandom, maxLength: UInt64) -> String {
        let alphabet: [Character] = Array("abcXYZ019 _-\"\\/\n\t\u{0}\u{7f}é中😀\u{2028}")
        let length = Int(random.next() % (maxLength + 1))
        return String((0..<length).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] })
    }

    private func randomValue(_ random: inout FastRandom, depth: Int) -> EventValue {
        switch random.next() % (depth > 18 ? 8 : 10) {
        case 0: return .string(randomString(&random, maxLength: 12))
        case 1: return .int(Int(truncatingIfNeeded: random.next()) >> Int(random.next() % 64))
        case 2:
            let special: [Double] = [
                0, -0.0, 1e-300, .leastNonzeroMagnitude, .greatestFiniteMagnitude, .nan, .infinity, 0.1, -2.5,
            ]
            return random.next() % 4 == 0
                ? .double(special[Int(random.next() % UInt64(special.count))])
                : .double(Double(bitPattern: random.next() & 0x7FEF_FFFF_FFFF_FFFF) * (random.next() % 2 == 0 ? 1 : -1))
        case 3: return .bool(random.next() % 2 == 0)
        case 4: return .null
        case 5:
            switch random.next() % 4 {
            case 0:
                return .date(
                    Date(timeIntervalSince1970: Self.edgeDates[Int(random.next() % UInt64(Self.edgeDates.count))]))
            // Any bit pattern: NaNs, infinities, subnormals, both signs.
            case 1: return .date(Date(timeIntervalSince1970: Double(bitPattern: random.next())))
            // The whole representable range, to the microsecond.
            default:
                let span =
                    UInt64(ISO8601Milliseconds.latestMilliseconds - ISO8601Milliseconds.earliestMilliseconds) * 1000
                let microseconds = Int64(random.next() % span) + ISO8601Milliseconds.earliestMilliseconds * 1000
                return .date(Date(timeIntervalSince1970: Double(microseconds) / 1_000_000))
            }
        case 6: return .string("")
        case 7: return Self.edgeValues[Int(random.next() % UInt64(Self.edgeValues.count))]
        case 8: return .array((0..<Int(random.next() % 4)).map { _ in randomValue(&random, depth: depth + 1) })
        default: return .object(randomObject(&random, depth: depth + 1))
        }
    }

    private func randomObject(_ random: inout FastRandom, depth: Int) -> [String: EventValue] {
        var object: [String: EventValue] = [:]
        for _ in 0..<Int(random.next() % 5) {
            let key =
                random.next() % 16 == 0
                ? Self.edgeKeys[Int(random.next() % UInt64(Self.edgeKeys.count))] : randomString(&random, maxLength: 8)
            object[key] = randomValue(&random, depth: depth)
        }
        return object
    }
}

extension EventEncoderTests {
    /// Strings are scanned eight bytes at a time: each byte JSON escapes,
    /// and some it must not, at every offset of a 24-byte string, one or
    /// two of them, come out as Foundation's reader reads them back.
    @Test func everyEscapeAtEveryOffset() throws {
        let special: [Character] = (0..<0x20).map { Character(Unicode.Scalar($0)) } + ["\"", "\\", "\u{7F}", "é", "/"]
        for character in special {
            for offset in 0..<24 {
                var characters = Array(repeating: Character("a"), count: 24)
                characters[offset] = character
                characters[(offset + 9) % 24] = character
                let text = String(characters)
                let json = try EventEncoder.encode(["k": .string(text)])
                let parsed = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: String]
                #expect(parsed == ["k": text], "\(json)")
                let escapes = character.asciiValue.map { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C } ?? false
                #expect(json.utf8.contains(0x5C) == escapes, "\(json)")
            }
        }
    }
}
