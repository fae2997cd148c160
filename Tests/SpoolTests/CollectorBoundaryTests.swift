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

    @Test(
        "C1: a plain JSON endpoint that cannot read gzip: every event arrives, none is dead-lettered, one extra request"
    )
    func plainJSONEndpointWithoutGzip() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["plain_json": true])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 100, timerInterval: 3_600)
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
        let again = uploadingEngine(directory, collector: collector, batchSize: 100, timerInterval: 3_600)
        try await again.start()
        let more = try recordEvents(again, 5, prefix: "later")
        try await again.flush()
        expectArrived(more, collector)
        #expect(collector.requests().filter { $0.content_encoding == "gzip" }.count == 1)
        await again.close()
    }

    @Test(
        "C4: a request held while the retention bound drops its events, then refused with 401: nothing unsent is dead-lettered"
    )
    func heldRequestRefusedAfterTheRetentionBound() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "hold", "times": 1, "hang_seconds": 30])
        let engine = uploadingEngine(
            directory, collector: collector, batchSize: 100, timerInterval: 3_600, maximumRetainedEvents: 150)
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
        let collector = try await TestCollector(directory)
        try await collector.control(["require_headers": ["x-api-key": "new"]])
        let key = Protected("old")
        let request = UploadRequestOptions(headerProvider: { ["X-API-Key": key.withLock { $0 }] })
        let engine = uploadingEngine(directory, collector: collector, batchSize: 10, request: request)
        try await engine.start()
        let ids = try recordEvents(engine, 25)
        await expectUploadDeferred { try await engine.flush() }
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
        let collector = try await TestCollector(directory)
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
            await collector.waitFor { requests in
                Set(requests.filter { $0.status == 200 }.flatMap(\.ids)).isSuperset(of: ids)
            })
        #expect(try await deadLetterCount(engine) == 0)
        await engine.close()
    }

    @Test(
        "C3: bisection: one bad event in 64 costs at most 2·log2(64) more requests; a batch refused at every level is not split further"
    )
    func bisectionIsBounded() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        // A clock that stands still: neither the timer nor a backoff retry
        // starts a pass of its own, however long the test takes, so the
        // requests counted below are the flushes' alone.
        let engine = uploadingEngine(directory, collector: collector, batchSize: 100, clock: ManualClock())
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
        // singled out, so none is dead-lettered and the batch is kept, after
        // at most the bisection's budget of requests.
        try await collector.control(["mode": "status", "status": 400])
        let before = collector.requests().count
        let more = try recordEvents(engine, 64, prefix: "more")
        try await engine.settle()
        await expectUploadDeferred { try await engine.flush() }
        #expect(collector.requests().count - before <= 2 + Uploader.bisectionBudget(64))
        #expect(try await deadLetterCount(engine) == 1)
        try await collector.control(["mode": "ok"])
        try await flushUntilDone(engine)
        expectArrived(more, collector)
        await engine.close()
    }

    @Test(
        "C2: a refusal of the request keeps every event, holds uploading back naming the status, and ends when the collector takes them",
        arguments: [401, 403, 404, 405, 407, 411, 414, 415])
    func requestRefusalsKeepTheEvents(status: Int) async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["path_status": ["/collect": status]])
        let held = Protected(0)
        // A clock that stands still: no automatic retry joins the requests counted below.
        var configuration = uploadingConfiguration(directory, collector: collector, batchSize: 20, clock: ManualClock())
        configuration.diagnosticHandler = { if $0.kind == .uploadHeldBack { held.withLock { $0 += 1 } } }
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        let ids = try recordEvents(engine, 6)
        await expectUploadDeferred { try await engine.flush() }
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.deadLettered == 0 && statistics.pending == 7)
        #expect(statistics.heldBack?.hasPrefix("HTTP \(status)") == true, "\(statistics.heldBack ?? "nil")")
        // A 415 is the one status answered twice: gzipped, then uncompressed.
        #expect(collector.requests().count == (status == 415 ? 2 : 1))
        #expect(try await waitUntil { held.withLock { $0 } > 0 })
        try await collector.control(["path_status": [String: Int]()])
        try await flushUntilDone(engine)
        expectArrived(ids, collector)
        #expect(try await engine.uploadStatistics().heldBack == nil)
        await engine.close()
    }

    @Test("C5: dead letters go back to the tail of the log with their ids, for the uploader only")
    func deadLettersCanBePutBack() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let listener = CollectingListener()
        var configuration = uploadingConfiguration(directory, collector: collector, batchSize: 100)
        configuration.dispatcher = DefaultEventDispatcher(
            format: SpoolBatchFormat(), request: UploadRequestOptions(compression: .identity))
        let engine = EventEngine(configuration: configuration)
        engine.events.addDurableObserver(listener, id: "requeue")
        try await engine.start()
        let ids = try recordEvents(engine, 9)
        try await collector.control(["reject_ids": [ids[4]]])
        try await engine.flush()
        #expect(try await deadLetterCount(engine) == 1)
        // The collector is fixed; only the matching dead letters go back.
        try await collector.control(["reject_ids": [String]()])
        #expect(try await engine.requeueDeadLetters(.status(500)) == 0)
        #expect(try await engine.requeueDeadLetters(.reasonContaining("rejected event")) == 1)
        try await engine.flush()
        #expect(try await deadLetterCount(engine) == 0)
        let arrivals = collector.acceptedIDs()
        #expect(arrivals.last == ids[4], "the same id, at the tail")
        #expect(arrivals.filter { $0 == ids[4] }.count == 1)
        _ = try recordEvents(engine, 1, prefix: "after")
        try await engine.settle()
        #expect(try await waitUntil { listener.customNames.count == 10 })
        #expect(listener.customNames.filter { $0 == "e4" }.count == 1, "listeners do not get it again")
        await engine.close()
    }

    @Test("C5: dead letters put back never push queued events out: at most the room the queue bound leaves")
    func requeueRespectsTheQueueBound() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let engine = uploadingEngine(directory, collector: collector, batchSize: 100, maximumRetainedEvents: 100)
        try await engine.start()
        let refused = try recordEvents(engine, 9, prefix: "early")
        try await collector.control(["reject_ids": Array(refused.prefix(5))])
        try await engine.flush()
        #expect(try await deadLetterCount(engine) == 5)
        try await collector.control(["reject_ids": [String](), "mode": "status", "status": 503])
        let queued = try recordEvents(engine, 99, prefix: "queued")  // 99 in the queue, bound 100
        try await engine.settle()
        #expect(try await engine.requeueDeadLetters() == 1, "room for one")
        #expect(try await deadLetterCount(engine) == 4)
        try await collector.control(["mode": "ok"])
        try await flushUntilDone(engine)
        #expect(try await engine.requeueDeadLetters() == 4)
        try await engine.flush()
        expectArrived(queued + refused, collector)
        #expect(try await engine.uploadStatistics().dropped == 0)
        await engine.close()
    }

    @Test("C5: dead letters have a count bound, and what it removes is counted")
    func deadLettersAreBounded() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        var configuration = uploadingConfiguration(directory, collector: collector, batchSize: 100)
        configuration.deadLetterLimits = DeadLetterLimits(maximumCount: 2, maximumAge: nil)
        let evicted = Protected(0)
        configuration.diagnosticHandler = { d in
            if d.kind == .deadLettersEvicted { evicted.withLock { $0 += d.eventCount } }
        }
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        let ids = try recordEvents(engine, 15)
        try await collector.control(["reject_ids": [ids[1], ids[5], ids[9], ids[13]]])
        try await engine.flush()
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.deadLettered == 2)
        #expect(statistics.deadLettersEvicted == 2)
        let kept = try await engine.query { connection in
            try connection.withStatement("SELECT id FROM dead_letters ORDER BY seq") { statement in
                var kept: [String] = []
                while try statement.step() { kept.append(statement.string(at: 0)) }
                return kept
            }
        }
        #expect(kept == [ids[9], ids[13]], "the newest are kept")
        #expect(try await waitUntil { evicted.withLock { $0 } == 2 })
        expectArrived(ids.filter { ![ids[1], ids[5], ids[9], ids[13]].contains($0) }, collector)
        await engine.close()
    }

    @Test("C6: every request is a result on the stream and a row in upload_batches, splits included")
    func everyRequestIsRecorded() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let engine = uploadingEngine(
            directory, collector: collector, batchSize: 100, request: UploadRequestOptions(compression: .identity))
        try await engine.start()
        let stream = engine.uploadResults()
        let ids = try recordEvents(engine, 15)  // with session_start: 16
        try await collector.control(["reject_ids": [ids[6]]])
        try await engine.flush()
        let requests = collector.requests()
        var results: [UploadBatchResult] = []
        for await result in stream {
            results.append(result)
            if results.count == requests.count { break }
        }
        #expect(results.map(\.status) == requests.map(\.status))
        #expect(results.first?.eventCount == 16 && results.first?.outcome == .bisected)
        #expect(results.filter { $0.outcome == .deadLettered }.map(\.firstEventID) == [ids[6]])
        let rows = try await engine.query { connection in
            try connection.withStatement("SELECT outcome, status, event_count FROM upload_batches_readable ORDER BY id")
            {
                statement in
                var rows: [String] = []
                while try statement.step() {
                    rows.append("\(statement.string(at: 0)) \(statement.int(at: 1)) \(statement.int(at: 2))")
                }
                return rows
            }
        }
        #expect(rows.count == requests.count)
        #expect(rows.first == "bisected 400 16")
        #expect(rows.contains("dead_lettered 400 1"))
        await engine.close()
    }
}
