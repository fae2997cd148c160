import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// More than one request in flight (W6, `maximumConcurrentRequests`):
/// against the real test collector, holding the first request (mode "hold")
/// while the batch after it goes and is answered.
@Suite(.needsChildProcesses)
struct ConcurrentUploadTests {
    /// An engine on `directory` sending batches of 10 to `collector`, two
    /// requests at a time, whose backoff after a failure outlasts the test:
    /// only `flush()` retries.
    static func engine(_ directory: TemporaryDirectory, _ collector: TestCollector) -> EventEngine {
        var configuration = uploadingConfiguration(
            directory, collector: collector, batchSize: 10, requestTimeout: PipelinedUploadTests.patientRequests,
            retry: RetryPolicy(initialDelay: 3_600))
        configuration.maximumConcurrentRequests = 2
        return EventEngine(configuration: configuration)
    }

    /// An engine (``engine(_:_:)``) holding 39 events recorded while uploads
    /// were paused (with the session's start: 4 batches), once uploads
    /// resume; its uploader, and the events' ids. `hold`: the collector's
    /// control for those ids, set before the requests arrive.
    static func resumed(
        _ directory: TemporaryDirectory, _ collector: TestCollector, hold: ([String]) -> [String: any Sendable]
    ) async throws -> (EventEngine, Uploader, [String]) {
        let engine = Self.engine(directory, collector)
        try await engine.start()
        try await engine.pauseUploads()
        let ids = try recordEvents(engine, 39)
        try await engine.settle()
        try await collector.control(hold(ids))
        try await engine.resumeUploads()
        return (engine, try PipelinedUploadTests.uploader(engine), ids)
    }

    /// ``resumed(_:_:hold:)`` with the collector holding every request,
    /// once the first two are both held.
    static func twoHeld(_ directory: TemporaryDirectory, _ collector: TestCollector)
        async throws -> (EventEngine, Uploader, [String])
    {
        let resumed = try await Self.resumed(
            directory, collector, hold: { _ in ["mode": "hold", "hang_seconds": PipelinedUploadTests.patientRequests] })
        #expect(try await collector.waitForHeld(2), "the second batch did not go while the first was in flight")
        // Only the batch after the first was read ahead: the window is full.
        #expect(resumed.1.pipeline.withLock { $0.prepared } == 1)
        return resumed
    }

    /// The requests that carried `batch`'s first event, in arrival order.
    static func requests(carrying first: String, _ collector: TestCollector) -> [TestCollector.Request] {
        collector.requests().filter { $0.ids.first == first }
    }

    /// Each of `ids` taken exactly once by the collector.
    static func takenOnce(_ ids: [String], _ collector: TestCollector) -> Bool {
        let taken = collector.requests().filter(\.taken).flatMap(\.ids).filter(Set(ids).contains)
        return taken.sorted() == ids.sorted()
    }

    @Test(
        "W6: with two requests in flight, the next batch goes while the one before it is held, no third goes, and every event is taken once"
    )
    func twoInFlight() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let (engine, uploader, ids) = try await Self.twoHeld(directory, collector)
        #expect(collector.requests().isEmpty)
        try await collector.control(["mode": "ok", "release": 200])
        try await flushUntilDone(engine)

        let requests = collector.requests()
        #expect(requests.count == 4, "a batch went twice or was split: \(requests.map(\.ids.count))")
        #expect(Self.takenOnce(ids, collector))
        #expect(requests.allSatisfy { $0.header("X-Retry-Count") == "0" })
        let counts = uploader.pipeline.withLock { $0 }
        #expect(counts.discarded == 0 && counts.sent == counts.prepared, "\(counts)")
        #expect(try await engine.uploadStatistics().pending == 0)
        await engine.close()
    }

    @Test(
        "W6, W3: the answer to the request ahead is lost while the one beside it was taken: both are sent again under their Idempotency-Keys, and the collector keeps one copy of each event"
    )
    func lostAnswerAhead() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        // The first batch is taken and its answer lost (the connection
        // closes after a second); whichever request arrives first, the one
        // beside it is answered 200.
        let (engine, uploader, ids) = try await Self.resumed(directory, collector) { ids in
            ["lose_ids": [ids[0]: 1], "hang_seconds": 1]
        }
        #expect(try await waitUntil(asking: { try await engine.uploadStatistics().failedRequests == 1 }))
        #expect(collector.requests().count == 2, "a third batch went beside the two")
        #expect(uploader.pipeline.withLock { $0.discarded } == 1)
        // Not settled: the first batch's answer never came.
        #expect(try await engine.uploadStatistics().pending == 40)

        try await flushUntilDone(engine)
        for first in [collector.requests().first { $0.ids.contains(ids[0]) }?.ids.first, ids[9]] {
            let sends = Self.requests(carrying: try #require(first), collector)
            #expect(sends.map { $0.duplicate ?? false } == [false, true], "taken twice, or never")
            #expect(Set(sends.map { $0.header("Idempotency-Key") }).count == 1, "sent again under another key")
            #expect(sends.map { $0.header("X-Retry-Count") } == ["0", "1"])
        }
        #expect(Self.takenOnce(ids, collector))
        #expect(try await engine.uploadStatistics().pending == 0)

        // The request beside the failed one is on record as retried.
        let outcomes = try await engine.query { connection in
            try connection.withStatement("SELECT outcome FROM upload_batches WHERE first_event_id = ? ORDER BY id") {
                statement in
                try statement.bind(ids[9], at: 1)
                var outcomes: [String] = []
                while try statement.step() { outcomes.append(statement.string(at: 0)) }
                return outcomes
            }
        }
        #expect(outcomes == ["retried", "accepted"])
        await engine.close()
    }

    @Test(
        "W6: close() with two requests in flight waits for both; the batch answered beside the one ahead is sent again by the next launch, taken once"
    )
    func closeWithTwoInFlight() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let (engine, uploader, ids) = try await Self.twoHeld(directory, collector)
        let closing = Task { await engine.close() }
        #expect(try await waitUntil(asking: { await uploader.schedule.closed }))
        try await collector.control(["mode": "ok", "release": 200])
        _ = await closing.value
        #expect(collector.requests().count == 2, "a batch went after close()")

        let again = Self.engine(directory, collector)
        try await again.start()
        try await flushUntilDone(again)
        #expect(Self.takenOnce(ids, collector))
        let second = Self.requests(carrying: ids[9], collector)
        #expect(
            second.count == 2 && Set(second.map { $0.header("Idempotency-Key") }).count == 1,
            "sent again under another key")
        await again.close()
    }

    @Test(
        "W6: a Kafka REST answer that settles its batch per record leaves the batches sent beside it next: nothing is written twice",
        arguments: [1, 2, 3])
    func perRecordAnswerKeepsTheWindow(concurrentRequests: Int) async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["format": "kafka"])
        var configuration = uploadingConfiguration(
            directory, collector: collector, batchSize: 10, format: .kafkaREST,
            request: UploadRequestOptions(compression: .identity))
        configuration.maximumConcurrentRequests = concurrentRequests
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        try await engine.pauseUploads()
        let ids = try recordEvents(engine, 59, parameters: UploadFormatTests.parameters)
        try await engine.settle()
        // The first batch's answer refuses one record for good and takes the rest.
        try await collector.control(["record_errors": [ids[2]: ["code": 50002]]])
        try await engine.resumeUploads()
        try await flushUntilDone(engine)

        let taken = collector.acceptedIDs().filter(Set(ids).contains)
        #expect(taken.sorted() == ids.filter { $0 != ids[2] }.sorted(), "an event written twice, or never")
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.deadLettered == 1 && statistics.pending == 0, "\(statistics)")
        #expect(PipelinedUploadTests.delivered(collector).count == Set(PipelinedUploadTests.delivered(collector)).count)
        await engine.close()
    }
}
