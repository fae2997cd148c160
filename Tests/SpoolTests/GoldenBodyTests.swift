import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// The request body each format writes for each message type (I6), compared
/// whole with a golden copy: ids, the anonymous id and the session id, which
/// are random, are replaced by placeholders; the time is a test clock's, and
/// `sentAt` (W5) is the same clock's.
struct GoldenBodyTests {
    /// One event of each type after `session_start`, recorded at
    /// 2023-11-14T22:13:20Z with a context set.
    func engine() async throws -> EventEngine {
        let engine = try await startedEngine { $0.clock = ManualClock() }
        try engine.setContext(EventContext(app: ["version": "2.1"], locale: "fr-FR"))
        try engine.record("purchase", parameters: ["amount": 9.5])
        try engine.screen("Checkout", properties: ["step": 2])
        try engine.identify(userId: "u-1", traits: ["plan": "pro"])
        try engine.group("acme", traits: ["seats": 12])
        try engine.alias("u-2")
        try await engine.settle()
        return engine
    }

    /// The body `format` writes for the engine's events, as canonical JSON
    /// with placeholders.
    func body(_ engine: EventEngine, _ format: some BatchFormat) async throws -> String {
        let clock = try engine.batchClock()
        let read = try await engine.query {
            try UploadBatch.read(after: 0, limit: 100, format: format, clock: clock, maximumBytes: .max, from: $0)
        }
        guard case .batch(let batch)? = read else { throw TestSetupError("no batch") }
        let identity = try await engine.identity()
        let session = try #require(engine.currentSessionID)
        var ids: [String: String] = [:]
        func placeholders(_ value: Any) -> Any {
            switch value {
            case let object as [String: Any]:
                return object.mapValues(placeholders)
            case let array as [Any]:
                return array.map(placeholders)
            case let string as String where string == identity.anonymousId:
                return "<anonymous id>"
            case let string as String where string == session:
                return "<session>"
            case let string as String where string.count == 36 && string.dropFirst(14).hasPrefix("7"):
                // A UUIDv7 event id: numbered in order of appearance.
                if ids[string] == nil { ids[string] = "<id \(ids.count + 1)>" }
                return ids[string]!
            default:
                return value
            }
        }
        let json = try JSONSerialization.jsonObject(with: batch.body)
        let data = try JSONSerialization.data(withJSONObject: placeholders(json), options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self).replacingOccurrences(of: "\\/", with: "/")
    }

    static let library = #""library":{"name":"spool","version":"\#(SpoolVersion.current)"}"#
    static let context = #""app":{"version":"2.1"},\#(library),"locale":"fr-FR","sessionId":"<session>""#
    static let time = "2023-11-14T22:13:20.000Z"

    @Test("I6: Segment's body for track, screen, identify, group and alias")
    func goldenSegment() async throws {
        let engine = try await engine()
        let body = try await body(engine, try SegmentBatchFormat(writeKey: "wk"))
        let (context, time) = (Self.context, Self.time)
        let expected = [
            // session_start was recorded at start(), before the context was set.
            #"{"anonymousId":"<anonymous id>","context":{\#(Self.library),"sessionId":"<session>"},"event":"session_start","messageId":"<id 1>","properties":{},"timestamp":"\#(time)","type":"track"}"#,
            #"{"anonymousId":"<anonymous id>","context":{\#(context)},"event":"purchase","messageId":"<id 2>","properties":{"amount":9.5},"timestamp":"\#(time)","type":"track"}"#,
            #"{"anonymousId":"<anonymous id>","context":{\#(context)},"messageId":"<id 3>","name":"Checkout","properties":{"step":2},"timestamp":"\#(time)","type":"screen"}"#,
            #"{"anonymousId":"<anonymous id>","context":{\#(context)},"messageId":"<id 4>","timestamp":"\#(time)","traits":{"plan":"pro"},"type":"identify","userId":"u-1"}"#,
            #"{"anonymousId":"<anonymous id>","context":{\#(context)},"groupId":"acme","messageId":"<id 5>","timestamp":"\#(time)","traits":{"seats":12},"type":"group","userId":"u-1"}"#,
            #"{"anonymousId":"<anonymous id>","context":{\#(context)},"messageId":"<id 6>","previousId":"u-1","timestamp":"\#(time)","type":"alias","userId":"u-2"}"#,
        ]
        #expect(body == #"{"batch":[\#(expected.joined(separator: ","))],"sentAt":"\#(time)","writeKey":"wk"}"#)
        await engine.close()
    }

    @Test("I6: Spool's body and Kafka REST's records for every message type")
    func goldenSpoolAndKafka() async throws {
        let engine = try await engine()
        let time = Self.time
        let context = #""context":{"app":{"version":"2.1"},"locale":"fr-FR"}"#
        let events = [
            #"{"anonymousId":"<anonymous id>","id":"<id 1>","name":"session_start","parameters":{},"session":"<session>","timestamp":"\#(time)","type":"track"}"#,
            #"{"anonymousId":"<anonymous id>",\#(context),"id":"<id 2>","name":"purchase","parameters":{"amount":9.5},"session":"<session>","timestamp":"\#(time)","type":"track"}"#,
            #"{"anonymousId":"<anonymous id>",\#(context),"id":"<id 3>","name":"Checkout","parameters":{"step":2},"session":"<session>","timestamp":"\#(time)","type":"screen"}"#,
            #"{"anonymousId":"<anonymous id>",\#(context),"id":"<id 4>","name":"identify","parameters":{"plan":"pro"},"session":"<session>","timestamp":"\#(time)","type":"identify","userId":"u-1"}"#,
            #"{"anonymousId":"<anonymous id>",\#(context),"id":"<id 5>","name":"group","parameters":{"seats":12},"session":"<session>","target":"acme","timestamp":"\#(time)","type":"group","userId":"u-1"}"#,
            #"{"anonymousId":"<anonymous id>",\#(context),"id":"<id 6>","name":"alias","parameters":{},"session":"<session>","target":"u-1","timestamp":"\#(time)","type":"alias","userId":"u-2"}"#,
        ]
        // W5: recorded in this launch and sent at once on the test clock:
        // each age is 0 on the launch's monotonic clock.
        let aged = events.map { #"{"age":0,"# + $0.dropFirst() }
        // W4: nothing lost, every cause at zero.
        let lost =
            #""dead_lettered":0,"free_space":0,"queue_age":0,"queue_bytes":0,"queue_count":0,"salvaged":0,"wal_lost":0"#
        let spool = try await body(engine, .spool)
        #expect(
            spool == #"{"events":[\#(aged.joined(separator: ","))],"sentAt":"\#(time)","spool":{"lost":{\#(lost)}}}"#)
        // A record's value carries the request's sentAt: the envelope does
        // not reach the topic.
        let values = aged.map { $0.replacingOccurrences(of: #""session":"#, with: #""sentAt":"\#(time)","session":"#) }
        let keys = ["<anonymous id>", "<anonymous id>", "<anonymous id>", "u-1", "u-1", "u-2"]
        let records = zip(keys, values).map { #"{"key":"\#($0)","value":\#($1)}"# }
        #expect(try await body(engine, .kafkaREST) == #"{"records":[\#(records.joined(separator: ","))]}"#)
        await engine.close()
    }
}
