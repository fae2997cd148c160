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
    /// were paused (with the session's start: 4 batches), whose first
    /// request the collector holds once they resume, while the second
    /// batch's request has been answered 200 beside it; its uploader, and
    /// the events' ids.
    static func heldWithSecondAnswered(_ directory: TemporaryDirectory, _ collector: TestCollector)
        async throws -> (EventEngine, Uploader, [String])
    {
        let engine = Self.engine(directory, collector)
        try await engine.start()
        try await engine.pauseUploads()
        let ids = try recordEvents(engine, 39)
        try await engine.settle()
        try await collector.control(["mode": "hold", "times": 1, "hang_seconds": PipelinedUploadTests.patientRequests])
        try await engine.resumeUploads()
        #expect(try await collector.waitForHeld())
        #expect(
            await collector.waitFor { $0.count == 1 }, "the second batch did not go while the first was in flight")
        #expect(collector.requests().first?.ids == Array(ids[9..<19]))
        return (engine, try PipelinedUploadTests.uploader(engine), ids)
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
        let (engine, uploader, ids) = try await Self.heldWithSecondAnswered(directory, collector)
        #expect(try await collector.control([:]) == 1, "the first request is still held")
        try await collector.control(["release": 200])
        try await flushUntilDone(engine)

        let requests = collector.requests()
        #expect(requests.count == 4, "a batch went twice or was split: \(requests.map(\.ids.count))")
        // The third batch went only once the first was answered.
        let firstBatch = try #require(requests.first { $0.ids.contains(ids[0]) })
        let thirdBatch = try #require(requests.first { $0.ids.first == ids[19] })
        #expect(firstBatch.t <= thirdBatch.t, "the third batch went while the first was held")
        #expect(Self.takenOnce(ids, collector))
        #expect(requests.allSatisfy { $0.header("X-Retry-Count") == "0" })
        let counts = uploader.pipeline.withLock { $0 }
        #expect(counts.discarded == 0 && counts.sent == counts.prepared, "\(counts)")
        #expect(try await engine.uploadStatistics().pending == 0)
        await engine.close()
    }

    @Test(
        "W6, W3: the request ahead is answered 503 while the one beside it was taken: that batch is sent again after it under the same Idempotency-Key, and the collector keeps one copy of each event"
    )
    func refusalAhead() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let (engine, uploader, ids) = try await Self.heldWithSecondAnswered(directory, collector)
        try await collector.control(["release": 503])
        #expect(try await waitUntil(asking: { try await engine.uploadStatistics().failedRequests == 1 }))
        #expect(collector.requests().count == 2, "a batch went after the 503")
        #expect(uploader.pipeline.withLock { $0.discarded } == 1)
        // Not settled: the first batch was not taken.
        #expect(try await engine.uploadStatistics().pending == 40)

        try await flushUntilDone(engine)
        let first = collector.requests().filter { $0.ids.contains(ids[0]) }
        #expect(first.map(\.status) == [503, 200])
        #expect(first.map { $0.header("X-Retry-Count") } == ["0", "1"])
        let second = Self.requests(carrying: ids[9], collector)
        #expect(second.map(\.status) == [200, 200])
        #expect(second.map { $0.duplicate ?? false } == [false, true], "the collector took the second batch twice")
        #expect(Set(second.map { $0.header("Idempotency-Key") }).count == 1, "sent again under another key")
        #expect(second.map { $0.header("X-Retry-Count") } == ["0", "1"])
        #expect(Self.takenOnce(ids, collector))
        #expect(try await engine.uploadStatistics().pending == 0)

        // The request beside the refused one is on record as retried.
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
        let (engine, uploader, ids) = try await Self.heldWithSecondAnswered(directory, collector)
        let closing = Task { await engine.close() }
        #expect(try await waitUntil(asking: { await uploader.schedule.closed }))
        try await collector.control(["release": 200])
        _ = await closing.value
        #expect(collector.requests().count == 2, "a batch went after close()")

        let again = Self.engine(directory, collector)
        try await again.start()
        try await flushUntilDone(again)
        #expect(Self.takenOnce(ids, collector))
        let second = Self.requests(carrying: ids[9], collector)
        #expect(Set(second.map { $0.header("Idempotency-Key") }).count == 1, "sent again under another key")
        #expect(second.map { $0.duplicate ?? false } == [false, true])
        await again.close()
    }
}
