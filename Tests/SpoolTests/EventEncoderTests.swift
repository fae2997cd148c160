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
            _ expected: EventValidationError, _ name: String = "ok", _ parameters: [String: EventValue] = [:]
        ) {
            #expect(throws: expected) {
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
        for _ in 0..<EventLimits.maximumDepth { deep = [deep] }
        #expect(throws: EventValidationError.self) { _ = try EventEncoder.encode(["deep": deep]) }
        var ok: EventValue = 1
        for _ in 0..<(EventLimits.maximumDepth - 2) { ok = [ok] }
        #expect(throws: Never.self) { _ = try EventEncoder.encode(["ok": ok]) }
        let huge = String(repeating: "x", count: EventLimits.maximumEncodedBytes)
        #expect(throws: EventValidationError.self) { _ = try EventEncoder.encode(["huge": .string(huge)]) }
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

    /// The extreme dates from issue 8 (eight of them trapped in the
    /// formatter and killed the host process; the other two wrote years of
    /// six digits and more).
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

    /// Random names and parameter trees (bounded, seeded): nothing crashes,
    /// invalid input is a typed error, and every accepted event reads back
    /// from the database identical to what was recorded (dates as strings).
    @Test func fuzzRecordReadsBackIdentical() async throws {
        let seed = UInt64(Date().timeIntervalSince1970)
        var random = FastRandom(seed: seed)
        let engine = try await startedEngine()
        var expected: [(name: String, parameters: [String: EventValue])] = []
        var rejected = 0
        for _ in 0..<600 {
            let name = randomString(&random, maxLength: random.next() % 20 == 0 ? 300 : 24)
            let parameters = randomObject(&random, depth: 1)
            do {
                if try engine.record(name, parameters: parameters).isAccepted {
                    expected.append((name, parameters.delivered))
                }
            } catch SpoolError.invalidEvent {
                rejected += 1
            }
        }
        try await engine.settle()
        let stored = try await engine.query { try $0.readEvents(after: 1, limit: .max) }
        #expect(stored.count == expected.count, "seed \(seed)")
        for (event, want) in zip(stored, expected) {
            #expect(event.name == want.name, "seed \(seed)")
            let parsed = try JSONReader.parseObject(event.parametersJSON)
            #expect(parsed == want.parameters, "seed \(seed): \(event.parametersJSON)")
        }
        // What Spool wrote is valid JSON to SQLite too.
        let invalid = try await engine.query {
            try $0.scalarInt("SELECT count(*) FROM events WHERE NOT json_valid(parameters)")
        }
        #expect(invalid == 0)
        #expect(rejected > 0 && !expected.isEmpty, "the fuzzer exercised both paths (seed \(seed))")
        await engine.close()
    }

    private func randomString(_ random: inout FastRandom, maxLength: UInt64) -> String {
        let alphabet: [Character] = Array("abcXYZ019 _-\"\\/\n\t\u{0}\u{7f}é中😀\u{2028}")
        let length = Int(random.next() % (maxLength + 1))
        return String((0..<length).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] })
    }

    private func randomValue(_ random: inout FastRandom, depth: Int) -> EventValue {
        switch random.next() % (depth > 18 ? 7 : 9) {
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
        case 5: return .date(Date(timeIntervalSince1970: Double(random.next() % 4_000_000_000_000) / 1000))
        case 6: return .string("")
        case 7: return .array((0..<Int(random.next() % 4)).map { _ in randomValue(&random, depth: depth + 1) })
        default: return .object(randomObject(&random, depth: depth + 1))
        }
    }

    private func randomObject(_ random: inout FastRandom, depth: Int) -> [String: EventValue] {
        var object: [String: EventValue] = [:]
        for _ in 0..<Int(random.next() % 5) {
            object[randomString(&random, maxLength: 8)] = randomValue(&random, depth: depth)
        }
        return object
    }
}
