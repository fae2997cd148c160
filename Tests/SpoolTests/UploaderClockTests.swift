import Foundation
import Testing

@_spi(TransportAuthoring) @testable import Spool
@testable import SpoolStorage

/// The uploader's timers — the retry after a failure, the periodic flush —
/// run on the database's clock, so these tests move time instead of
/// sleeping (D1, D3, D8).
@Suite("Uploader timers on the clock", .needsChildProcesses)
struct UploaderClockTests {
    @Test("D1: the backoff is measured on the clock, and the retry comes when the clock reaches it")
    func backoffFollowsTheClock() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        collector.stop()
        let clock = ManualClock()
        let engine = uploadingEngine(
            directory, collector: collector, batchSize: 5, timerInterval: 0,
            retry: RetryPolicy(initialDelay: 600, jitter: 1...1), clock: clock)
        try await engine.start()
        let ids = try recordEvents(engine, 7)
        await expectUploadDeferred { try await engine.flush() }
        // Automatic triggers wait for the backoff: exactly 600 s of this clock.
        #expect(try await engine.uploadStatistics().nextRetryIn == 600)
        try await collector.restart()
        clock.advance(by: 599)
        #expect(try await engine.uploadStatistics().nextRetryIn == 1)
        clock.advance(by: 1)
        #expect(
            await collector.waitFor { Set($0.filter { $0.status == 200 }.flatMap(\.ids)).isSuperset(of: ids) },
            "the retry did not come when the clock reached the backoff")
        #expect(try await waitUntil(asking: { try await engine.uploadStatistics().pending == 0 }))
        #expect(try await engine.uploadStatistics().nextRetryIn == nil)
        await engine.close()
    }

    @Test("D3: the periodic flush follows the clock; while suspended it starts nothing and asks for no window")
    func periodicFlushFollowsTheClock() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let clock = ManualClock()
        let engine = uploadingEngine(directory, collector: collector, batchSize: 100, timerInterval: 300, clock: clock)
        try await engine.start()
        let database = try #require(engine.databaseQueue)
        func delivered(_ ids: [String]) async -> Bool {
            await collector.waitFor { Set($0.filter { $0.status == 200 }.flatMap(\.ids)).isSuperset(of: ids) }
        }
        let first = try recordEvents(engine, 3)
        #expect(try await waitUntil(asking: { try await engine.uploadStatistics().pending >= 3 }))
        clock.advance(by: 300)
        #expect(await delivered(first), "the timer did not flush when the clock reached its interval")
        // Giving space back after the drain is a database timer of its own
        // (it does ask for a window): let it run first.
        #expect(try await waitUntil(asking: { try await engine.uploadStatistics().pending == 0 }))
        let beforeShrink = clock.timersRun
        clock.advance(by: 10)
        #expect(try await waitUntil { clock.timersRun > beforeShrink })

        let second = try recordEvents(engine, 2, prefix: "f")
        #expect(try await waitUntil(asking: { try await engine.uploadStatistics().pending == 2 }))
        let windows = Protected(0)
        database.onDeferredWork.withLock { $0 = { windows.withLock { $0 += 1 } } }
        await database.suspend()
        let ran = clock.timersRun
        clock.advance(by: 290)
        #expect(try await waitUntil { clock.timersRun > ran })
        #expect(windows.withLock { $0 } == 0, "the periodic timer asked for a background window")
        database.resume()
        #expect(try await engine.uploadStatistics().pending == 2, "a suspended timer started a flush")
        clock.advance(by: 300)
        #expect(await delivered(second), "the timer stopped after a suspended firing")
        await engine.close()
    }

    /// A custom dispatcher that answers every batch at once with 200, or,
    /// while `silent`, never calls its completion.
    final class SilentOrInstantDispatcher: EventDispatcher {
        let silent = Protected(true)
        let batches = Protected(0)
        func dispatchEvent(event: EventForDispatch, completionHandler: DispatchCompletionHandler?) {
            batches.withLock { $0 += 1 }
            guard !silent.withLock({ $0 }) else { return }
            completionHandler?(.response(status: 200, retryAfter: nil, message: nil))
        }
        func flushEvents() {}
    }

    @Test("D8: a silent dispatcher is given up on after 60 s of the clock; an instant answer leaves no timer")
    func silentDispatcherTimesOut() async throws {
        let directory = TemporaryDirectory()
        let clock = ManualClock()
        let dispatcher = SilentOrInstantDispatcher()
        var configuration = EngineConfiguration(
            database: .file(directory.url.appendingPathComponent("events.sqlite")),
            collectorURL: URL(string: "http://127.0.0.1:9/unused")!, batchSize: 100, uploadInterval: 3_600,
            dispatcher: dispatcher, retryPolicy: RetryPolicy(initialDelay: 3_600))
        configuration.clock = clock
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        _ = try recordEvents(engine, 4)
        // The four, and the session's start.
        #expect(try await waitUntil(asking: { try await engine.uploadStatistics().pending == 5 }))

        let silentFlush = Task { try await engine.flush() }
        #expect(try await waitUntil { dispatcher.batches.withLock { $0 } == 1 })
        #expect(clock.timersPending(dueIn: 60) == 1, "no timeout waits on the silent dispatcher")
        clock.advance(by: 59)
        #expect(try await engine.uploadStatistics().pending == 5)
        clock.advance(by: 1)
        await expectUploadDeferred { try await silentFlush.value }
        #expect(try await engine.uploadStatistics().pending == 5, "a batch nobody answered left the queue")

        dispatcher.silent.withLock { $0 = false }
        try await engine.flush()
        #expect(try await engine.uploadStatistics().pending == 0)
        #expect(dispatcher.batches.withLock { $0 } == 2)
        #expect(clock.timersPending(dueIn: 60) == 0, "an answer that came at once left a timeout timer behind")
        await engine.close()
    }

    /// Answers every request with a 200 a moment later, from another queue;
    /// the cancel closure it hands back holds a `Handle`, whose release is
    /// counted.
    final class LaterTransport: CallbackUploadTransport {
        final class Handle: Sendable {
            let released: Protected<Int>
            init(_ released: Protected<Int>) { self.released = released }
            deinit { released.withLock { $0 += 1 } }
        }

        let (sent, released) = (Protected(0), Protected(0))

        func send(_ request: UploadRequest) async throws -> UploadResponse { UploadResponse(status: 200) }

        func send(
            _ request: UploadRequest, completion: @escaping @Sendable (Result<UploadResponse, any Error>) -> Void
        ) -> @Sendable () -> Void {
            sent.withLock { $0 += 1 }
            let handle = Handle(released)
            DispatchQueue.global().async { completion(.success(UploadResponse(status: 200))) }
            return { withExtendedLifetime(handle) {} }
        }
    }

    @Test("D8: an answered request is let go at once; its dispatch timer does not keep it for the timeout")
    func answeredRequestIsReleased() async throws {
        let directory = TemporaryDirectory()
        let transport = LaterTransport()
        let dispatcher = DefaultEventDispatcher(
            request: UploadRequestOptions(compression: .identity), transport: transport)
        var configuration = EngineConfiguration.uploading(
            to: URL(string: "http://127.0.0.1:9/unused")!, dispatcher: dispatcher, in: directory.url)
        configuration.uploadInterval = 3_600
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        for round in 0..<3 {
            _ = try recordEvents(engine, 2, prefix: "r\(round)_")
            try await engine.flush()
        }
        #expect(try await engine.uploadStatistics().pending == 0)
        #expect(transport.sent.withLock { $0 } >= 3)
        // Each request's timer waits 65 s; the requests were answered long before.
        let (sent, released) = (transport.sent, transport.released)
        #expect(
            try await waitUntil { released.withLock { $0 } == sent.withLock { $0 } },
            "answered requests are still held: \(released.withLock { $0 }) of \(sent.withLock { $0 }) let go")
        await engine.close()
    }
}
