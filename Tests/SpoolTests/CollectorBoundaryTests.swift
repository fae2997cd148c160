import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// What crosses the collector boundary, against the real collector process:
/// compression is negotiated, a refusal of the request keeps its events, and
/// only events the collector singled out are dead-lettered (C1–C6).
@Suite(.needsChildProcesses)
struct CollectorBoundaryTests {
    func deadLetterCount(_ engine: EventEngine) async throws -> Int {
        try await engine.query { try $0.deadLetterCount() }
    }

    func expectArrived(_ ids: [String], _ collector: TestCollector, sourceLocation: SourceLocation = #_sourceLocation) {
        let missing = Set(ids).subtracting(collector.acceptedIDs())
        #expect(missing.count == 0, "of \(ids.count)", sourceLocation: sourceLocation)
    }

    @Test("C1: a plain JSON endpoint that cannot read gzip: every event arrives, none is dead-lettered, one extra request")
    func plainJSONEndpointWithoutGzip() async throws {
        let directory = TemporaryDirectory()
        let collector = try TestCollector(directory)
        try await collector.control(["plain_json": true])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 100, timerInterval: 60)
        try await engine.start()
        let ids = try recordEvents(engine, 200)  // with session_start: 201 events, 3 batches
        try await engine.settle()
        try await engine.flush()
        expectArrived(ids, collector)
        #expect(try await deadLetterCount(engine) == 0)
        let requests = collector.requests()
        #expect(requests.count <= 4, "3 batches and one uncompressed retry: \(requests.count) requests")
        #expect(requests.filter { $0.content_encoding == "gzip" }.count == 1)
        await engine.close()

        // The next launch remembers: no gzip request at all.
        let again = uploadingEngine(directory, collector: collector, batchSize: 100, timerInterval: 60)
        try await again.start()
        let more = try recordEvents(again, 5, prefix: "later")
        try await again.flush()
        expectArrived(more, collector)
        #expect(collector.requests().filter { $0.content_encoding == "gzip" }.count == 1)
        await again.close()
    }

    @Test("C4: a request held while the retention bound drops its events, then refused with 401: nothing unsent is dead-lettered")
    func heldRequestRefusedAfterTheRetentionBound() async throws {
        let directory = TemporaryDirectory()
        let collector = try TestCollector(directory)
        try await collector.control(["mode": "hold", "times": 1, "hang_seconds": 30])
        let engine = uploadingEngine(
            directory, collector: collector, batchSize: 100, timerInterval: 60, maxQueueSize: 150)
        try await engine.start()
        _ = try recordEvents(engine, 99)  // with session_start: one full batch, sent and held
        #expect(try await collector.waitForHeld())
        let newer = try recordEvents(engine, 150, prefix: "newer")
        try await engine.settle()  // committed: the bound dropped the 100 in flight
        try await collector.control(["release": 401])
        try await flushUntilDone(engine)
        #expect(try await deadLetterCount(engine) == 0)
        expectArrived(newer, collector)
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.dropped == 100)
        #expect(statistics.pending == 0)
        await engine.close()
    }

    @Test("C2: 401 until the header provider has the new key: the events wait, then every one arrives")
    func unauthorizedUntilTheKeyIsFixed() async throws {
        let directory = TemporaryDirectory()
        let collector = try TestCollector(directory)
        try await collector.control(["require_headers": ["x-api-key": "new"]])
        let key = Protected("old")
        let request = UploadRequestOptions(headerProvider: { ["X-API-Key": key.withLock { $0 }] })
        let engine = uploadingEngine(directory, collector: collector, batchSize: 10, request: request)
        try await engine.start()
        let ids = try recordEvents(engine, 25)
        await #expect(throws: UploadError.self) { try await engine.flush() }
        #expect(collector.requests().allSatisfy { $0.status == 401 })
        #expect(try await deadLetterCount(engine) == 0)
        key.withLock { $0 = "new" }
        try await flushUntilDone(engine)
        expectArrived(ids, collector)
        #expect(try await deadLetterCount(engine) == 0)
        await engine.close()
    }

    @Test("C2: a collector path answering 404 for 3 s during a deploy: the events wait, then every one arrives")
    func notFoundDuringADeploy() async throws {
        let directory = TemporaryDirectory()
        let collector = try TestCollector(directory)
        try await collector.control(["path_status": ["/collect": 404]])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 5, timerInterval: 0.2)
        try await engine.start()
        let ids = try recordEvents(engine, 30)
        // The automatic retries keep meeting the 404 for 3 s.
        #expect(
            await collector.waitFor(timeout: 15) { requests in
                let times = requests.filter { $0.status == 404 }.map(\.t)
                return (times.last ?? 0) - (times.first ?? 0) >= 3
            })
        try await collector.control(["path_status": [String: Int]()])
        #expect(
            await collector.waitFor(timeout: 15) { requests in
                Set(requests.filter { $0.status == 200 }.flatMap(\.ids)).isSuperset(of: ids)
            })
        #expect(try await deadLetterCount(engine) == 0)
        await engine.close()
    }

    @Test("C3: bisection: one bad event in 64 costs at most 2·log2(64) more requests; a batch refused at every level is not split further")
    func bisectionIsBounded() async throws {
        let directory = TemporaryDirectory()
        let collector = try TestCollector(directory)
        let engine = uploadingEngine(directory, collector: collector, batchSize: 100, timerInterval: 60)
        try await engine.start()
        let ids = try recordEvents(engine, 63)  // with session_start: one batch of 64
        try await engine.settle()
        try await collector.control(["reject_ids": [ids[40]]])
        try await engine.flush()
        // The first request's 400 to a gzip body is sent once more
        // uncompressed (the collector has not taken gzip yet), then split.
        #expect(collector.requests().count <= 2 + 2 * 6)
        #expect(try await deadLetterCount(engine) == 1)
        expectArrived(ids.filter { $0 != ids[40] }, collector)

        // Every request refused with 400, whatever it holds: no event is
        // singled out, so none is dead-lettered and the batch is kept.
        try await collector.control(["mode": "status", "status": 400])
        let before = collector.requests().count
        let more = try recordEvents(engine, 64, prefix: "more")
        try await engine.settle()
        await #expect(throws: UploadError.self) { try await engine.flush() }
        #expect(collector.requests().count - before <= 1 + 2 * 6)
        #expect(try await deadLetterCount(engine) == 1)
        try await collector.control(["mode": "ok"])
        try await flushUntilDone(engine)
        expectArrived(more, collector)
        await engine.close()
    }
}
