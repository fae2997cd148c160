import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Uploads follow the system's network path where the platform reports one:
/// they wait while there is none, and start at once when one returns.
@Suite(.needsChildProcesses)
struct NetworkPathTests {
    @Test(
        "without a network path automatic uploads wait and spend no retries; when a path returns they start at once, not after the backoff"
    )
    func uploadsWaitForANetworkPath() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let path = ManualNetworkPath(available: false)
        var configuration = uploadingConfiguration(
            directory, collector: collector, batchSize: 5, timerInterval: 0.05,
            retry: RetryPolicy(initialDelay: 60, maximumDelay: 60, multiplier: 2, jitter: 1...1))
        configuration.networkPath = path
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        let offline = try recordEvents(engine, 9)
        try await engine.settle()
        // The size trigger and a timer every 50 ms: no request while offline.
        #expect(await !collector.waitFor(timeout: 0.5) { !$0.isEmpty })
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.waitingForNetwork && statistics.failedRequests == 0 && statistics.pending == 10)

        // A path, and a collector that fails once: the backoff is 60 s.
        try await collector.control(["mode": "status", "status": 503, "times": 1])
        path.set(available: true)
        #expect(await collector.waitFor { $0.contains { $0.status == 503 } })
        // The collector logs a request before it answers: wait for the engine.
        #expect(try await waitUntil(asking: { try await engine.uploadStatistics().nextRetryIn ?? 0 > 30 }))

        // The path goes and comes back: the upload starts at once.
        path.set(available: false)
        #expect(try await waitUntil(asking: { try await engine.uploadStatistics().waitingForNetwork }))
        let online = Date().timeIntervalSince1970
        path.set(available: true)
        #expect(await collector.waitFor(timeout: 10) { $0.contains { $0.status == 200 } })
        let delivered = try #require(collector.requests().first { $0.status == 200 })
        let latency = delivered.t - online
        // Well inside the 60 s backoff (1–2 ms on an idle machine; how fast
        // is spool-bench's business, not this test's).
        #expect(latency < 30, "started \(Int(latency * 1_000)) ms after the path returned, not after the 60 s backoff")
        #expect(await collector.waitFor { Set($0.filter { $0.status == 200 }.flatMap(\.ids)).isSuperset(of: offline) })
        await engine.close()
    }
}
