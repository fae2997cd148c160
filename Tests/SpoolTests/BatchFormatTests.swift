import Foundation
import Testing

@_spi(FormatAuthoring) @testable import Spool
@testable import SpoolStorage

/// The batch formats without a network: the bodies they write from stored
/// rows, their limits, and what they make of each collector answer.
struct BatchFormatTests {
    /// An engine with no uploader (nothing leaves the log) and `count`
    /// events recorded in its session; returns the events' ids.
    func engine(recording count: Int, parameters: [String: EventValue] = ["price": 9.99, "screen": "home"])
        async throws -> (EventEngine, [String])
    {
        let engine = try await startedEngine()
        let ids = try recordEvents(engine, count, prefix: "event_", parameters: { _ in parameters })
        try await engine.settle()
        return (engine, ids)
    }

    func read(_ engine: EventEngine, format: some BatchFormat, limit: Int = 100, maximumBytes: Int = .max)
        async throws -> UploadBatch.Read?
    {
        let clock = try engine.batchClock()
        return try await engine.query {
            try UploadBatch.read(
                after: 0, limit: limit, format: format, clock: clock, maximumBytes: maximumBytes, from: $0)
        }
    }

    func body(_ engine: EventEngine, format: some BatchFormat, limit: Int = 100) async throws -> (
        UploadBatch, [String: Any]
    ) {
        guard case .batch(let batch)? = try await read(engine, format: format, limit: limit) else {
            throw TestSetupError("no batch")
        }
        let json = try #require(try JSONSerialization.jsonObject(with: batch.body) as? [String: Any])
        return (batch, json)
    }

    /// The stored parameters of each event, as text.
    func storedParameters(_ engine: EventEngine) async throws -> [String] {
        try await engine.query { try $0.readEvents(after: 0, limit: .max, now: 0).map(\.parametersJSON) }
    }

    // MARK: - Bodies

    @Test(
        "Spool's format: sentAt, the loss counts, and events with id, type, name, timestamp, age, session, parameters spliced as stored, identity"
    )
    func spoolBody() async throws {
        let (engine, ids) = try await engine(recording: 3)
        let identity = try await engine.identity()
        let (batch, json) = try await body(engine, format: .spool)
        #expect(batch.count == 4, "session_start and three events")
        #expect(isISOMilliseconds(json["sentAt"]))
        // W4: every cause, at zero when nothing was lost.
        let lost = try #require((json["spool"] as? [String: Any])?["lost"] as? [String: Int])
        #expect(lost == Dictionary(uniqueKeysWithValues: LossCause.allCases.map { ($0.rawValue, 0) }))
        let events = try #require(json["events"] as? [[String: Any]])
        #expect(events.compactMap { $0["id"] as? String }.suffix(3) == ids[...])
        // W5: recorded in this launch, so each age is the monotonic clock's
        // (no "ageClock").
        #expect(
            events.allSatisfy {
                Set($0.keys) == ["id", "type", "name", "timestamp", "age", "session", "parameters", "anonymousId"]
            })
        #expect(events.allSatisfy { ($0["age"] as? Int).map { $0 >= 0 } == true })
        #expect(events.allSatisfy { $0["type"] as? String == "track" })
        #expect(events.allSatisfy { $0["anonymousId"] as? String == identity.anonymousId })
        #expect(events.allSatisfy { $0["session"] as? String == engine.currentSessionID })
        // Spliced byte for byte: each stored object appears verbatim in the body.
        let text = String(decoding: batch.body, as: UTF8.self)
        for stored in try await storedParameters(engine) {
            #expect(text.contains(#""parameters":\#(stored),"#))
        }
        await engine.close()
    }

    @Test("Segment's format: track calls with messageId, properties, timestamp, identity, context and sessionId")
    func segmentBody() async throws {
        let engine = try await startedEngine()
        try engine.identify(userId: "user-7")
        let ids = try recordEvents(engine, 3, prefix: "event_", parameters: { _ in ["price": 9.99, "screen": "home"] })
        try await engine.settle()
        let identity = try await engine.identity()
        // The configured identity stands in only for events stored without one.
        let format = try SegmentBatchFormat(
            writeKey: "wk_\"quoted\"", anonymousId: "anon-1", userId: "someone-else",
            context: ["app": ["name": "Demo", "build": 42], "sessionId": "replaced", "locale": "fr-FR"])
        let (batch, json) = try await body(engine, format: format)
        #expect(json["writeKey"] as? String == "wk_\"quoted\"")
        #expect(isISOMilliseconds(json["sentAt"]))
        let all = try #require(json["batch"] as? [[String: Any]])
        #expect(all.count == batch.count)
        #expect(all.map { $0["type"] as? String } == ["track", "identify", "track", "track", "track"])
        let items = all.filter { $0["type"] as? String == "track" }
        #expect(items.compactMap { $0["messageId"] as? String }.suffix(3) == ids[...])
        #expect(all[0]["userId"] == nil, "session_start was recorded before identify")
        for item in items.dropFirst() {
            #expect(
                Set(item.keys) == [
                    "type", "event", "properties", "messageId", "timestamp", "anonymousId", "userId", "context",
                ])
            #expect(item["anonymousId"] as? String == identity.anonymousId)
            #expect(item["userId"] as? String == "user-7")
            #expect(isISOMilliseconds(item["timestamp"]))
            let context = try #require(item["context"] as? [String: Any])
            #expect(
                context["sessionId"] as? String == engine.currentSessionID, "Spool's session, not the configured one")
            #expect(context["locale"] as? String == "fr-FR")
            #expect((context["app"] as? [String: Any])?["build"] as? Int == 42)
            #expect((context["library"] as? [String: Any])?["name"] as? String == "spool")
        }
        #expect(items.last?["event"] as? String == "event_2")
        #expect((items.last?["properties"] as? [String: Any])?["screen"] as? String == "home")
        let text = String(decoding: batch.body, as: UTF8.self)
        for stored in try await storedParameters(engine) { #expect(text.contains(#""properties":\#(stored),"#)) }
        #expect(format.headers == ["Authorization": "Basic " + Data(#"wk_"quoted":"#.utf8).base64EncodedString()])
        #expect(format.contentType == "application/json")
        await engine.close()
    }

    @Test("Segment's format for an event outside a session and no user: no sessionId, no userId, the library named")
    func segmentWithoutSession() async throws {
        let engine = try await startedEngine()
        let log = try #require(engine.state.withLock { $0.log })
        _ = try log.append(EventRecord(name: "outside", parametersJSON: #"{"k":1}"#, recordedAt: 1_700_000_000.5))
        try await log.waitUntilAllDurable()
        let format = try SegmentBatchFormat(writeKey: "k", anonymousId: "a")
        let (_, json) = try await body(engine, format: format)
        let item = try #require((json["batch"] as? [[String: Any]])?.last)
        #expect(item["event"] as? String == "outside")
        #expect(item["timestamp"] as? String == "2023-11-14T22:13:20.500Z")
        #expect(item["userId"] == nil)
        let context = try #require(item["context"] as? [String: Any])
        #expect(Set(context.keys) == ["library"])
        let kafka = try await body(engine, format: .kafkaREST).1
        let record = try #require((kafka["records"] as? [[String: Any]])?.last)
        #expect(record["key"] is NSNull, "no session: a null key")
        await engine.close()
    }

    @Test("the Kafka REST format: records keyed by the user (or by session), each value the Spool event object")
    func kafkaBody() async throws {
        let (engine, ids) = try await engine(recording: 2)
        let identity = try await engine.identity()
        let (batch, json) = try await body(engine, format: .kafkaREST)
        #expect(Set(json.keys) == ["records"])
        let records = try #require(json["records"] as? [[String: Any]])
        #expect(records.count == batch.count)
        for record in records {
            #expect(Set(record.keys) == ["key", "value"])
            let value = try #require(record["value"] as? [String: Any])
            #expect(
                Set(value.keys) == [
                    "id", "type", "name", "timestamp", "age", "sentAt", "session", "parameters", "anonymousId",
                ])
            #expect(isISOMilliseconds(value["sentAt"]), "W5: the record carries the request's sentAt")
            #expect(record["key"] as? String == identity.anonymousId, "no user: keyed by the anonymous id")
            #expect(value["session"] as? String == engine.currentSessionID)
        }
        let bySession = try #require(
            try await body(engine, format: .kafkaREST(key: .session)).1["records"] as? [[String: Any]])
        #expect(bySession.allSatisfy { $0["key"] as? String == engine.currentSessionID })
        #expect(records.compactMap { ($0["value"] as? [String: Any])?["id"] as? String }.suffix(2) == ids[...])
        let format = KafkaRESTBatchFormat()
        #expect(format.contentType == "application/vnd.kafka.json.v2+json")
        #expect(format.headers == ["Accept": "application/vnd.kafka.v2+json"])
        #expect(!format.compressesByDefault, "Confluent's proxy cannot read gzip")
        #expect(SpoolBatchFormat().compressesByDefault)
        await engine.close()
    }

    // MARK: - Limits

    /// Spool's body with a cap of its own.
    struct CappedFormat: BatchFormat {
        var maximumEventsPerRequest: Int? { 7 }
        func appendPrologue(sentAt: Date, to body: inout [UInt8]) {
            SpoolBatchFormat().appendPrologue(sentAt: sentAt, to: &body)
        }
        func append(_ event: BatchEvent, to body: inout [UInt8]) { SpoolBatchFormat().append(event, to: &body) }
        func appendEpilogue(sentAt: Date, to body: inout [UInt8]) {
            SpoolBatchFormat().appendEpilogue(sentAt: sentAt, to: &body)
        }
    }

    @Test("a format's event cap limits each request whatever the batch size (Segment's: 2,500)")
    func eventCap() async throws {
        let (engine, _) = try await engine(recording: 20, parameters: [:])
        guard case .batch(let batch)? = try await read(engine, format: CappedFormat(), limit: 100) else {
            Issue.record("no batch")
            return
        }
        #expect(batch.count == 7)
        guard case .batch(let spool)? = try await read(engine, format: .spool, limit: 100) else {
            Issue.record("no batch")
            return
        }
        #expect(spool.count == 21, "Spool's format has no cap of its own")
        let segment = try SegmentBatchFormat(writeKey: "k", anonymousId: "a")
        #expect(segment.maximumEventsPerRequest == 2_500)
        #expect(segment.maximumBodyBytes == 500_000)
        #expect(segment.maximumEventBytes == 32_000)
        await engine.close()
    }

    @Test("Segment: bodies stay under 500 KB; an event over 32 KB ends a batch, and alone is reported oversized")
    func segmentByteLimits() async throws {
        let engine = try await startedEngine()
        let twenty = String(repeating: "m", count: 20_000)
        for index in 0..<30 { try engine.record("medium_\(index)", parameters: ["blob": .string(twenty)]) }
        try engine.record("huge", parameters: ["blob": .string(String(repeating: "h", count: 40_000))])
        try engine.record("after_huge")
        try await engine.settle()
        let format = try SegmentBatchFormat(writeKey: "k", anonymousId: "a")
        var position: Int64 = 0
        var sizes: [Int] = []
        var oversized: [Int] = []
        let clock = try engine.batchClock()
        while let read = try await engine.query({ [position] in
            try UploadBatch.read(after: position, limit: 100, format: format, clock: clock, from: $0)
        }) {
            switch read {
            case .batch(let batch):
                sizes.append(batch.body.count)
                position = batch.last
            case .oversized(let at, let bytes):
                oversized.append(bytes)
                position = at
            }
        }
        #expect(sizes.count >= 3, "\(sizes)")
        #expect(sizes.allSatisfy { $0 <= SegmentBatchFormat.maximumRequestBytes }, "\(sizes)")
        #expect(oversized.count == 1)
        #expect(oversized.allSatisfy { $0 > 40_000 })
        await engine.close()
    }

    @Test("the per-request bound is the tighter of the uploader's and the format's")
    func boundIsTheTighter() async throws {
        let (engine, _) = try await engine(recording: 50)
        guard case .batch(let small)? = try await read(engine, format: .spool, maximumBytes: 1_000) else {
            Issue.record("no batch")
            return
        }
        #expect(small.body.count <= 1_000 && small.count > 1)
        await engine.close()
    }

    // MARK: - Verdicts

    func response(_ status: Int, _ body: String = "", headers: [String: String] = [:]) -> UploadResponse {
        UploadResponse(status: status, headers: headers, body: Data(body.utf8))
    }

    /// The classification table, a row per status class (C2, C3).
    static let table: [(statuses: [Int], verdict: String)] = [
        ([200, 201, 202, 204], "accepted"),
        ([100, 301, 302, 307, 408, 425, 429, 500, 502, 503, 504], "retry"),
        ([400, 413, 422], "split"),
        ([401, 403, 404, 405, 407, 409, 410, 411, 414, 415, 451], "refusedRequest"),
    ]

    @Test(
        "C2, C3: the standard reading, one row of the table each: 2xx accepted; 1xx, 3xx, 408, 425, 429, 5xx retried; 400, 413, 422 split; other 4xx refuse the request",
        arguments: table.indices)
    func standardVerdicts(row: Int) throws {
        for status in Self.table[row].statuses {
            let verdict = UploadVerdict.standard(for: response(status))
            let kind: String
            switch verdict {
            case .accepted: kind = "accepted"
            case .retry: kind = "retry"
            case .split: kind = "split"
            case .refusedRequest: kind = "refusedRequest"
            case .rejected: kind = "rejected"
            case .perEvent: kind = "perEvent"
            }
            #expect(kind == Self.table[row].verdict, "HTTP \(status)")
        }
    }

    @Test("the standard reading keeps the collector's reason and Retry-After")
    func standardReasons() throws {
        #expect(UploadVerdict.standard(for: response(400, "bad")) == .split(reason: "HTTP 400: bad"))
        #expect(
            UploadVerdict.standard(for: response(429, "slow down", headers: ["retry-after": "12"]))
                == .retry(reason: "HTTP 429: slow down", retryAfter: 12))
        #expect(UploadVerdict.standard(for: response(401)) == .refusedRequest(reason: "HTTP 401", retryAfter: nil))
        // Segment and RudderStack read their answers the standard way.
        let segment = try SegmentBatchFormat(writeKey: "k", anonymousId: "a")
        #expect(
            segment.verdict(for: response(400, "Invalid JSON"), eventCount: 3)
                == .split(reason: "HTTP 400: Invalid JSON"))
    }

    static let confluent = #"{"key_schema_id":null,"value_schema_id":null,"offsets":["#

    @Test("Kafka REST 200: per-record error codes in both Confluent encodings and Redpanda's Kafka codes")
    func kafkaPerRecord() {
        let format = KafkaRESTBatchFormat()
        let body =
            Self.confluent
            + #"{"partition":0,"offset":10,"error_code":null,"error":null},"#
            + #"{"partition":null,"offset":null,"error_code":2,"error":"retriable"},"#
            + #"{"partition":null,"offset":null,"error_code":1,"error":"fatal"},"#
            + #"{"partition":null,"offset":null,"error_code":50003,"error":"retriable kafka"},"#
            + #"{"partition":null,"offset":null,"error_code":50002,"error":"kafka"},"#
            + #"{"partition":0,"offset":11}]}"#
        #expect(
            format.verdict(for: response(200, body), eventCount: 6)
                == .perEvent([
                    .accepted, .retry(reason: "Kafka error_code 2: retriable"),
                    .rejected(reason: "Kafka error_code 1: fatal"),
                    .retry(reason: "Kafka error_code 50003: retriable kafka"),
                    .rejected(reason: "Kafka error_code 50002: kafka"), .accepted,
                ]))
        // Redpanda: only non-zero codes, raw Kafka protocol codes, no message.
        let redpanda =
            #"{"offsets":[{"partition":0,"offset":1},{"partition":0,"offset":-1,"error_code":6},"#
            + #"{"partition":0,"offset":-1,"error_code":10},{"partition":0,"offset":2,"error_code":0}]}"#
        #expect(
            format.verdict(for: response(200, redpanda), eventCount: 4)
                == .perEvent([
                    .accepted, .retry(reason: "Kafka error_code 6"), .rejected(reason: "Kafka error_code 10"),
                    .accepted,
                ]))
        let allGood = Self.confluent + #"{"partition":0,"offset":1,"error_code":null,"error":null}]}"#
        #expect(format.verdict(for: response(200, allGood), eventCount: 1) == .accepted)
        #expect(format.verdict(for: response(200, allGood), eventCount: 2) == .perEvent([.accepted]), "one missing")
        #expect(format.verdict(for: response(204), eventCount: 2) == .accepted, "no per-record results")
        #expect(format.verdict(for: response(200, "OK"), eventCount: 2) == .accepted)
    }

    @Test(
        "Kafka REST errors: topic not found holds back, unreadable records split, schema errors rejected, 5xx retried")
    func kafkaEnvelopes() {
        let format = KafkaRESTBatchFormat()
        func verdict(_ status: Int, _ code: Int?, headers: [String: String] = [:]) -> UploadVerdict {
            let body = code.map { #"{"error_code":\#($0),"message":"m"}"# } ?? ""
            return format.verdict(for: response(status, body, headers: headers), eventCount: 4)
        }
        #expect(verdict(404, 40401) == .refusedRequest(reason: "HTTP 404 error_code 40401: m", retryAfter: nil))
        #expect(verdict(404, 40402) == .refusedRequest(reason: "HTTP 404 error_code 40402: m", retryAfter: nil))
        #expect(verdict(422, 422) == .split(reason: "HTTP 422 error_code 422: m"))
        #expect(verdict(400, 400) == .split(reason: "HTTP 400 error_code 400: m"))
        #expect(verdict(413, nil) == .split(reason: "HTTP 413"))
        #expect(verdict(422, 42201) == .rejected(reason: "HTTP 422 error_code 42201: m"))
        #expect(verdict(422, 42202) == .rejected(reason: "HTTP 422 error_code 42202: m"))
        #expect(verdict(422, 42205) == .rejected(reason: "HTTP 422 error_code 42205: m"))
        #expect(verdict(500, 50003) == .retry(reason: "HTTP 500 error_code 50003: m", retryAfter: nil))
        #expect(
            verdict(503, 50301, headers: ["Retry-After": "5"])
                == .retry(reason: "HTTP 503 error_code 50301: m", retryAfter: 5))
        #expect(verdict(429, 42901) == .retry(reason: "HTTP 429 error_code 42901: m", retryAfter: nil))
        #expect(verdict(401, 40101) == .refusedRequest(reason: "HTTP 401 error_code 40101: m", retryAfter: nil))
        #expect(verdict(403, 40301) == .refusedRequest(reason: "HTTP 403 error_code 40301: m", retryAfter: nil))
        #expect(verdict(415, 415) == .refusedRequest(reason: "HTTP 415 error_code 415: m", retryAfter: nil))
    }

    @Test("a 415 names gzip as acceptable only when Accept-Encoding lists it with a non-zero weight")
    func acceptEncoding() {
        #expect(!Uploader.acceptsGzip(response(415)))
        #expect(!Uploader.acceptsGzip(response(415, headers: ["Accept-Encoding": "identity"])))
        #expect(!Uploader.acceptsGzip(response(415, headers: ["accept-encoding": "br, gzip;q=0"])))
        #expect(Uploader.acceptsGzip(response(415, headers: ["Accept-Encoding": "gzip"])))
        #expect(Uploader.acceptsGzip(response(415, headers: ["ACCEPT-ENCODING": "br, GZIP;q=0.5"])))
    }

    @Test("Retry-After: seconds or an HTTP date; nonsense and non-finite values are ignored")
    func retryAfter() {
        let now = Date(timeIntervalSince1970: 1_700_000_000)
        #expect(HTTPHeaders.retryAfter("7", now: now) == 7)
        #expect(HTTPHeaders.retryAfter("-3", now: now) == 0)
        #expect(HTTPHeaders.retryAfter("inf", now: now) == nil)
        #expect(HTTPHeaders.retryAfter("nan", now: now) == nil)
        #expect(HTTPHeaders.retryAfter("soon", now: now) == nil)
        #expect(HTTPHeaders.retryAfter("Tue, 14 Nov 2023 22:13:30 GMT", now: now) == 10)
    }
}
