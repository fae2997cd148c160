import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Pipelined preparation (W6): while a request is in flight the next batch
/// is read and gzipped, and it is sent only when the answer leaves it next.
/// Against the real test collector, holding a request (mode "hold") until
/// the uploader has prepared the batch after it, then answering.
@Suite(.needsChildProcesses)
struct PipelinedUploadTests {
    /// Long enough that a held request is answered by the test, never by
    /// the transport's timeout on a loaded machine.
    static let patientRequests: TimeInterval = 30

    /// An engine on `directory` sending batches of 10 to `collector`, whose
    /// backoff after a failure outlasts the test: only `flush()` sends.
    static func engine(_ directory: TemporaryDirectory, _ collector: TestCollector) -> EventEngine {
        uploadingEngine(
            directory, collector: collector, batchSize: 10, requestTimeout: patientRequests,
            retry: RetryPolicy(initialDelay: 3_600))
    }

    static func uploader(_ engine: EventEngine) throws -> Uploader {
        try #require(engine.uploaderBox.withLock { $0 })
    }

    /// Calls `start` (a flush, or resuming uploads paused while the events
    /// were recorded: a full batch starts a pass at once) with the
    /// collector holding the first request, and returns once the uploader
    /// has prepared the batch after it (`prepared` batches in all).
    static func holdWithNextPrepared(
        _ engine: EventEngine, _ collector: TestCollector, prepared: Int,
        start: @escaping @Sendable () async throws -> Void
    ) async throws -> Task<Void, any Error> {
        let uploader = try Self.uploader(engine)
        try await collector.control(["mode": "hold", "times": 1, "hang_seconds": patientRequests])
        let started = Task { try await start() }
        #expect(try await collector.waitForHeld())
        #expect(
            try await waitUntil { uploader.pipeline.withLock { $0.prepared } == prepared },
            "the batch after the one in flight was not prepared")
        return started
    }

    /// An engine (``engine(_:_:)``) holding `count` events recorded while
    /// uploads were paused, whose first request the collector holds once
    /// they resume, with the batch after it prepared; its uploader, and the
    /// events' ids.
    static func heldWithNextPrepared(_ directory: TemporaryDirectory, _ collector: TestCollector, events count: Int)
        async throws -> (EventEngine, Uploader, [String])
    {
        let engine = Self.engine(directory, collector)
        try await engine.start()
        try await engine.pauseUploads()
        let ids = try recordEvents(engine, count)
        try await engine.settle()
        _ = try await holdWithNextPrepared(engine, collector, prepared: 1) { try await engine.resumeUploads() }
        return (engine, try uploader(engine), ids)
    }

    /// The ids of every request the collector answered 2xx, in arrival
    /// order, with repeats: a batch sent again after it was accepted counts
    /// twice, although the collector took it once (its Idempotency-Key).
    static func delivered(_ collector: TestCollector) -> [String] {
        collector.requests().filter { ($0.status ?? 0) / 100 == 2 }.flatMap(\.ids)
    }

    @Test(
        "W6: a retry, a bisection and a pause while the next batch is prepared discard it; the collector gets every event once, in log order"
    )
    func orderWhilePrepared() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        // With the session's start: 6 batches.
        let (engine, uploader, ids) = try await Self.heldWithNextPrepared(directory, collector, events: 59)

        // A retry: the first batch is answered 503 while the second is ready.
        try await collector.control(["release": 503])
        #expect(try await waitUntil(asking: { try await engine.uploadStatistics().failedRequests == 1 }))
        #expect(collector.requests().count == 1, "the prepared batch went after a 503")

        // A bisection: its retry is answered 400 while the second is ready
        // again; one of its events is refused on its own.
        try await collector.control(["reject_ids": [ids[3]]])
        let flushing = try await Self.holdWithNextPrepared(engine, collector, prepared: 2) {
            try await engine.flush()
        }
        try await collector.control(["release": 400])
        try await flushing.value
        let retried = collector.requests().prefix(2)
        #expect(Set(retried.map { $0.header("Idempotency-Key") }).count == 1, "the retry is the same batch")
        #expect(retried.map { $0.header("X-Retry-Count") } == ["0", "1"])
        #expect(uploader.pipeline.withLock { $0.sent } >= 1, "no batch went as it was prepared")

        // A pause: the request in flight finishes, the batch prepared behind
        // it waits for resumeUploads().
        try await collector.control(["reject_ids": [String]()])
        try await engine.pauseUploads()
        let later = try recordEvents(engine, 30, prefix: "later")
        try await engine.settle()
        let before = collector.requests().count
        let prepared = uploader.pipeline.withLock { $0.prepared }
        _ = try await Self.holdWithNextPrepared(engine, collector, prepared: prepared + 1) {
            try await engine.resumeUploads()
        }
        let pausing = Task { try await engine.pauseUploads() }
        #expect(try await waitUntil(asking: { await uploader.schedule.pauses == 1 }))
        try await collector.control(["release": 200])
        try await pausing.value
        #expect(collector.requests().count == before + 1, "a batch went after pauseUploads()")
        #expect(try await engine.uploadStatistics().pending == 20)
        try await engine.resumeUploads()
        try await flushUntilDone(engine)

        let expected = ids.filter { $0 != ids[3] } + later
        #expect(Self.delivered(collector).filter(Set(expected).contains) == expected)
        #expect(try await engine.uploadStatistics().deadLettered == 1)
        let counts = uploader.pipeline.withLock { $0 }
        #expect(counts.discarded >= 3 && counts.prepared == counts.sent + counts.discarded, "\(counts)")
        await engine.close()
    }

    @Test("W6: stop() while the next batch is prepared: the request in flight is saved, nothing is lost or sent twice")
    func stopWhilePrepared() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        // With the session's start: 3 batches.
        let (engine, uploader, ids) = try await Self.heldWithNextPrepared(directory, collector, events: 29)
        let closing = Task { await engine.close() }
        #expect(try await waitUntil(asking: { await uploader.schedule.closed }))
        try await collector.control(["release": 200])
        _ = await closing.value
        #expect(collector.requests().count == 1, "the prepared batch went after stop()")
        #expect(uploader.pipeline.withLock { $0.discarded } == 1)

        let again = Self.engine(directory, collector)
        try await again.start()
        try await flushUntilDone(again)
        let delivered = Self.delivered(collector)
        #expect(delivered.filter(Set(ids).contains) == ids, "lost or sent twice")
        #expect(Set(delivered).count == delivered.count, "an event went twice")
        await again.close()
    }

    @Test(
        "W6, W1: another engine on the file pauses uploads while the next batch is prepared: the request in flight finishes, the prepared batch is not sent"
    )
    func pauseElsewhereWhilePrepared() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let (engine, uploader, ids) = try await Self.heldWithNextPrepared(directory, collector, events: 29)
        let other = Self.engine(directory, collector)
        try await other.start()
        try await other.pauseUploads()
        try await collector.control(["release": 200])
        #expect(try await waitUntil { uploader.pipeline.withLock { $0.discarded } == 1 })
        #expect(try await engine.uploadStatistics().paused)
        #expect(collector.requests().count == 1, "the prepared batch went after another engine paused uploads")

        try await other.resumeUploads()
        try await flushUntilDone(engine)
        let delivered = Self.delivered(collector)
        #expect(delivered.filter(Set(ids).contains) == ids, "lost or sent twice")
        await other.close()
        await engine.close()
    }

    @Test(
        "W6, L3: withdrawing consent or erasing while the next batch is prepared: the request in flight finishes, nothing recorded before is sent after, nothing twice",
        arguments: ["withdrawConsent", "eraseAllData"])
    func privacyWhilePrepared(_ call: String) async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let (engine, uploader, ids) = try await Self.heldWithNextPrepared(directory, collector, events: 29)
        let quiescing = Task {
            if call == "withdrawConsent" { try await engine.withdrawConsent() } else { try await engine.eraseAllData() }
        }
        #expect(try await waitUntil(asking: { await uploader.schedule.pauses == 1 }))
        try await collector.control(["release": 200])
        try await quiescing.value
        #expect(collector.requests().count == 1, "the prepared batch went after \(call)()")

        engine.setConsent(true)
        let after = try recordEvents(engine, 3, prefix: "after")
        try await flushUntilDone(engine)
        let delivered = Self.delivered(collector)
        #expect(delivered.filter(Set(ids).contains) == Array(ids.prefix(9)), "only the batch in flight")
        #expect(delivered.filter(Set(after).contains) == after)
        #expect(Set(delivered).count == delivered.count, "an event went twice")
        #expect(uploader.pipeline.withLock { $0.discarded } >= 1)
        await engine.close()
    }
}
