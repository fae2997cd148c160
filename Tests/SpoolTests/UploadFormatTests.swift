import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Each batch format against the real collector process, told to validate
/// that format and to answer as that collector does.
///
/// Bounded by the collector's waits and each request's timeout (Swift Testing's
/// `.timeLimit` needs iOS 16 / macOS 13, above the floor).
@Suite(.needsChildProcesses)
struct UploadFormatTests {
    /// An index, and text that needs escaping in every format.
    static func parameters(_ index: Int) -> [String: EventValue] {
        ["i": .int(index), "text": .string("é\"\(index)")]
    }

    /// The dead letters as `id|status|reason` (status `-` when none).
    func deadLetters(_ engine: EventEngine) async throws -> [String] {
        try await engine.query { connection in
            try connection.withStatement("SELECT id, status, reason FROM dead_letters ORDER BY seq") { statement in
                var rows: [String] = []
                while try statement.step() {
                    let status = statement.isNull(at: 1) ? "-" : String(statement.int(at: 1))
                    rows.append("\(statement.string(at: 0))|\(status)|\(statement.string(at: 2))")
                }
                return rows
            }
        }
    }

    // MARK: - Spool's format

    @Test("Spool's format: gzipped by default, valid for the collector, with Spool's User-Agent")
    func spoolFormatIsGzipped() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["format": "spool"])
        let engine = uploadingEngine(directory, collector: collector)
        try await engine.start()
        let ids = try recordEvents(engine, 5, parameters: Self.parameters)
        try await engine.flush()
        #expect(collector.formatErrors().isEmpty, "\(collector.formatErrors())")
        let request = try #require(collector.requests().first)
        #expect(request.content_encoding == "gzip")
        #expect(request.content_type == "application/json")
        #expect(request.bytes < request.decoded_bytes ?? 0, "smaller on the wire")
        #expect(request.header("User-Agent")?.hasPrefix("Spool/\(SpoolVersion.current) (") == true)
        #expect(Set(ids).isSubset(of: collector.acceptedIDs()))
        await engine.close()
    }

    // MARK: - Segment

    func segment(userId: String? = nil) throws -> SegmentBatchFormat {
        try SegmentBatchFormat(
            writeKey: "seg_write_key", anonymousId: "install-42", userId: userId,
            context: ["app": ["name": "Demo", "version": "2.1"]])
    }

    @Test("Segment: Basic auth with the write key, valid track calls, gzipped, each event once")
    func segmentDelivers() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["format": "segment", "write_key": "seg_write_key"])
        let engine = uploadingEngine(
            directory, collector: collector, batchSize: 4, format: try segment(userId: "user-7"), path: "/v1/batch")
        try await engine.start()
        try engine.identify(userId: "user-7")
        let ids = try recordEvents(engine, 9, parameters: Self.parameters)
        try await engine.flush()
        let identity = try await engine.identity()
        #expect(collector.formatErrors().isEmpty, "\(collector.formatErrors())")
        let requests = collector.requests()
        #expect(requests.allSatisfy { $0.status == 200 && $0.path == "/v1/batch" && $0.content_encoding == "gzip" })
        #expect(requests.first?.header("Authorization") == "Basic " + Data("seg_write_key:".utf8).base64EncodedString())
        let accepted = collector.acceptedIDs()
        #expect(Array(accepted.suffix(9)) == ids, "messageId is the event id, in order")
        #expect(accepted.count == Set(accepted).count, "each once")
        // The decoded body carries what was recorded, as recorded.
        let last = try #require(requests.last)
        let body = try #require(try JSONSerialization.jsonObject(with: last.rawBody) as? [String: Any])
        let item = try #require((body["batch"] as? [[String: Any]])?.last)
        #expect(item["event"] as? String == "e8")
        #expect((item["properties"] as? [String: Any])?["text"] as? String == "é\"8")
        #expect(item["userId"] as? String == "user-7")
        #expect(item["anonymousId"] as? String == identity.anonymousId, "the engine's, not the configured stand-in")
        let context = try #require(item["context"] as? [String: Any])
        #expect(context["sessionId"] as? String == engine.currentSessionID)
        #expect((context["app"] as? [String: Any])?["name"] as? String == "Demo")
        await engine.close()
    }

    @Test("C2: Segment: a wrong write key (401) keeps the events and holds uploading back, saying why")
    func segmentWrongKey() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["format": "segment", "write_key": "the_right_key"])
        let engine = uploadingEngine(directory, collector: collector, format: try segment())
        try await engine.start()
        _ = try recordEvents(engine, 2, parameters: Self.parameters)
        await expectUploadDeferred { try await engine.flush() }
        #expect(collector.requests().map(\.status) == [401])
        #expect(try await deadLetters(engine).isEmpty)
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.pending == 3, "session_start and both events")
        #expect(statistics.heldBack == "HTTP 401: Invalid Write Key")
        await engine.close()
    }

    @Test("Segment: a 400 for one bad message splits the batch; that message is dead-lettered, the rest delivered")
    func segmentBadMessage() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["format": "segment"])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 100, format: try segment())
        try await engine.start()
        let ids = try recordEvents(engine, 11, parameters: Self.parameters)
        try await collector.control(["reject_ids": [ids[6]]])
        try await engine.flush()
        let accepted = Set(collector.acceptedIDs())
        #expect(accepted.isSuperset(of: ids.filter { $0 != ids[6] }))
        #expect(!accepted.contains(ids[6]))
        #expect(try await deadLetters(engine) == ["\(ids[6])|400|HTTP 400: rejected event \(ids[6])"])
        await engine.close()
    }

    @Test("Segment: 429 waits for Retry-After, then the batch goes out once")
    func segmentRateLimit() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control([
            "format": "segment", "mode": "status", "status": 429, "retry_after": "1", "times": 1,
        ])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 3, format: try segment())
        try await engine.start()
        let ids = try recordEvents(engine, 2, parameters: Self.parameters)
        try await engine.settle()
        #expect(await collector.waitFor(timeout: 10) { $0.contains { $0.status == 200 } })
        let requests = collector.requests()
        #expect(requests.map(\.status) == [429, 200])
        try #require(requests.count >= 2)
        #expect(requests[1].t - requests[0].t >= 0.9, "waited for Retry-After")
        #expect(Set(ids).isSubset(of: collector.acceptedIDs()))
        await engine.close()
    }

    @Test("Segment: requests stay under 500 KB before compression; an event over 32 KB is never sent")
    func segmentLimits() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["format": "segment"])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 100, format: try segment())
        try await engine.start()
        let medium = String(repeating: "m", count: 20_000)
        let ids = try recordEvents(engine, 40, prefix: "medium_", parameters: { _ in ["blob": .string(medium)] })
        let huge = try engine.record("huge", parameters: ["blob": .string(String(repeating: "h", count: 40_000))])
        let after = try recordEvents(engine, 2, prefix: "after", parameters: Self.parameters)
        try await engine.flush()
        #expect(collector.formatErrors().isEmpty, "\(collector.formatErrors())")
        let requests = collector.requests()
        #expect(requests.count >= 2)
        #expect(requests.allSatisfy { ($0.decoded_bytes ?? .max) <= 500_000 }, "\(requests.map(\.decoded_bytes))")
        #expect(Set(collector.acceptedIDs()).isSuperset(of: ids + after))
        guard case .recorded(let hugeID) = huge else {
            Issue.record("\(huge)")
            return
        }
        #expect(!requests.flatMap(\.ids).contains(hugeID), "never sent")
        let letters = try await deadLetters(engine)
        #expect(letters.count == 1)
        #expect(letters.first?.hasPrefix("\(hugeID)|-|not sent: ") == true, "\(letters)")
        await engine.close()
    }

    // MARK: - Kafka REST

    @Test("Kafka REST: identity body, the proxy's content types, records keyed by session, valid for the proxy")
    func kafkaDelivers() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["format": "kafka"])
        let engine = uploadingEngine(
            directory, collector: collector, batchSize: 4, format: .kafkaREST, path: "/topics/app-events")
        try await engine.start()
        let ids = try recordEvents(engine, 7, parameters: Self.parameters)
        try await engine.flush()
        #expect(collector.formatErrors().isEmpty, "\(collector.formatErrors())")
        let requests = collector.requests()
        #expect(requests.allSatisfy { $0.status == 200 && $0.path == "/topics/app-events" })
        #expect(requests.allSatisfy { $0.content_encoding == nil }, "not gzipped by default")
        #expect(requests.first?.content_type == "application/vnd.kafka.json.v2+json")
        #expect(requests.first?.header("Accept") == "application/vnd.kafka.v2+json")
        #expect(Array(collector.acceptedIDs().suffix(7)) == ids)
        await engine.close()
    }

    @Test(
        "Kafka REST: per-record errors in a 200 — permanent ones dead-lettered, the prefix advances, the first retriable one and everything after it sent again",
        arguments: ["confluent", "redpanda"])
    func kafkaMixedRecordErrors(flavor: String) async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["format": "kafka", "kafka_flavor": flavor])
        // A slow automatic retry: the test looks at the state between the two requests.
        let engine = uploadingEngine(
            directory, collector: collector, batchSize: 100, retry: RetryPolicy(initialDelay: 30), format: .kafkaREST)
        try await engine.start()
        let ids = try recordEvents(engine, 6, parameters: Self.parameters)
        // Permanent: 50002 (Confluent) or MESSAGE_TOO_LARGE (Kafka's 10).
        // Retriable once: 50003 (Confluent) or NOT_LEADER_OR_FOLLOWER (6).
        let (permanent, retriable) = flavor == "confluent" ? (50002, 50003) : (10, 6)
        try await collector.control([
            "record_errors": [
                ids[1]: ["code": permanent], ids[3]: ["code": retriable, "times": 1],
            ]
        ])
        await expectUploadDeferred("the retriable record keeps the flush from finishing") {
            try await engine.flush()
        }
        var statistics = try await engine.uploadStatistics()
        #expect(statistics.pending == 3, "ids[3] and the two after it wait")
        #expect(statistics.deadLettered == 1)
        try await flushUntilDone(engine)

        let requests = collector.requests()
        #expect(requests.count == 2)
        #expect(requests.map(\.ids.count) == [7, 3], "session_start + 6, then ids[3...] again")
        #expect(requests.last?.ids == Array(ids[3...]))
        let accepted = collector.acceptedIDs()
        #expect(!accepted.contains(ids[1]))
        #expect(Set(accepted).isSuperset(of: ids.filter { $0 != ids[1] }))
        #expect(
            accepted.filter { $0 == ids[4] }.count == 2, "accepted after the retriable one: sent again (at least once)")
        let letters = try await deadLetters(engine)
        #expect(letters.count == 1)
        #expect(letters.first?.hasPrefix("\(ids[1])|200|Kafka error_code \(permanent)") == true, "\(letters)")
        statistics = try await engine.uploadStatistics()
        #expect(statistics.pending == 0)
        await engine.close()
    }

    @Test("Kafka REST: topic not found (40401) keeps the events until the topic exists")
    func kafkaTopicNotFound() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["format": "kafka", "mode": "status", "status": 404, "error_code": 40401])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 100, format: .kafkaREST)
        try await engine.start()
        let ids = try recordEvents(engine, 3, parameters: Self.parameters)
        await expectUploadDeferred { try await engine.flush() }
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.pending == 4 && statistics.deadLettered == 0)
        #expect(statistics.lastFailure?.contains("error_code 40401") == true, "\(statistics.lastFailure ?? "")")
        try await collector.control(["mode": "ok"])
        try await flushUntilDone(engine)
        #expect(Set(collector.acceptedIDs()).isSuperset(of: ids))
        #expect(try await deadLetters(engine).isEmpty)
        await engine.close()
    }

    @Test(
        "C1: compression .gzip overrides a format's default: a Confluent-like proxy cannot read it, and nothing is dead-lettered for it"
    )
    func kafkaGzipForced() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["format": "kafka"])
        let engine = uploadingEngine(
            directory, collector: collector, batchSize: 100, format: .kafkaREST,
            request: UploadRequestOptions(compression: .gzip))
        try await engine.start()
        _ = try recordEvents(engine, 1, parameters: Self.parameters)
        await expectUploadDeferred { try await engine.flush() }
        let requests = collector.requests()
        #expect(requests.allSatisfy { $0.content_encoding == "gzip" }, ".gzip means always")
        #expect(requests.first?.status == 400, "Confluent reads the gzip bytes as JSON")
        #expect(requests.count == 3, "the batch, then each event alone: refused the same way, so none is singled out")
        #expect(try await deadLetters(engine).isEmpty)
        #expect(try await engine.uploadStatistics().heldBack?.contains("HTTP 400") == true)
        await engine.close()
    }
}
