import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// The fault matrix against the real collector process: every accepted event
/// reaches it at least once and exactly once after deduplicating by id, except
/// dead-lettered ones, which sit in dead_letters with reasons; the request
/// log shows the backoff; order is kept per session.
@Suite(.needsChildProcesses)
struct UploadFaultTests {
    /// Every id arrived in a 2xx request, each once after deduplication, in order.
    func expectDeliveredInOrder(
        _ ids: [String], _ collector: TestCollector, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let accepted = collector.acceptedIDs()
        var seen = Set<String>()
        let firstArrivals = accepted.filter { seen.insert($0).inserted }
        let wanted = Set(ids)
        #expect(wanted.isSubset(of: seen), "missing \(wanted.subtracting(seen).count)", sourceLocation: sourceLocation)
        #expect(firstArrivals.filter(wanted.contains) == ids, "order per session", sourceLocation: sourceLocation)
    }

    @Test("5xx: kept and retried with growing backoff, never treated as success")
    func serverErrorsBackOff() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "status", "status": 500, "times": 4])
        let failuresReported = Protected<[String]>([])
        var configuration = uploadingConfiguration(directory, collector: collector, batchSize: 5)
        configuration.diagnosticHandler = { diagnostic in
            if diagnostic.kind == .uploadFailed { failuresReported.withLock { $0.append(diagnostic.message) } }
        }
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        let ids = try recordEvents(engine, 20)
        try await engine.settle()
        // The automatic retries carry it through the four failures.
        #expect(
            await collector.waitFor(timeout: 60) {
                Set($0.filter { $0.status == 200 }.flatMap(\.ids)).isSuperset(of: ids)
            })
        let requests = collector.requests()
        let failures = requests.filter { $0.status == 500 }
        #expect(failures.count == 4)
        // Backoff: the gaps after failures grow (50, 100, 200 ms × jitter 0.5–1).
        let times = requests.map(\.t)
        let gaps = zip(times.dropFirst(), times).map { $0 - $1 }.prefix(4)
        #expect(gaps.allSatisfy { $0 >= 0.02 }, "\(gaps)")
        #expect(requests.count <= 4 + 6, "no request storm: \(requests.count) requests")
        expectDeliveredInOrder(ids, collector)
        try await engine.flush()  // the last response may still be on its way
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.pending == 0)
        // Each failure is counted and reported: the four 500s, and any
        // request a loaded machine lets time out (its answer never read).
        let counted = engine.diagnosticCounts.occurrences[.uploadFailed] ?? 0
        #expect(try await waitUntil { failuresReported.withLock { $0.count } == counted })
        let reported = failuresReported.withLock { $0 }
        #expect(reported.filter { $0.contains("HTTP 500") }.count == 4, "\(reported)")
        #expect(statistics.failedRequests == reported.count, "\(reported)")
        await engine.close()
    }

    @Test("503 and 429 honour Retry-After")
    func retryAfterIsHonoured() async throws {
        for status in [503, 429] {
            let directory = TemporaryDirectory()
            let collector = try await TestCollector(directory)
            try await collector.control(["mode": "status", "status": status, "retry_after": "7", "times": 1])
            let clock = ManualClock()
            let engine = uploadingEngine(directory, collector: collector, batchSize: 3, timerInterval: 60, clock: clock)
            try await engine.start()
            let ids = try recordEvents(engine, 2)
            try await engine.settle()
            // The backoff is the collector's Retry-After, not the policy's.
            #expect(try await waitUntil(asking: { try await engine.uploadStatistics().nextRetryIn == 7 }))
            clock.advance(by: 6.9)
            #expect(try await engine.uploadStatistics().requests == 1, "nothing before Retry-After (\(status))")
            clock.advance(by: 0.1)
            #expect(await collector.waitFor(timeout: 30) { $0.contains { $0.status == 200 } })
            let requests = collector.requests()
            #expect(requests.first?.status == status)
            #expect(requests.count == 2, "nothing in between")
            expectDeliveredInOrder(ids, collector)
            await engine.close()
        }
    }

    @Test("400: the rejected events are isolated into dead letters with the status and a reason; the rest go on")
    func badRequestsAreIsolated() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        // One batch of 26 (no size trigger before the collector is told which ids to refuse).
        let engine = uploadingEngine(directory, collector: collector, batchSize: 100, timerInterval: 3_600)
        try await engine.start()
        let ids = try recordEvents(engine, 25)
        let rejected = [ids[3], ids[17]]
        try await collector.control(["reject_ids": rejected])
        try await engine.flush()
        let good = ids.filter { !rejected.contains($0) }
        expectDeliveredInOrder(good, collector)
        #expect(Set(collector.acceptedIDs()).isDisjoint(with: rejected))
        let letters = try await engine.query { connection in
            try connection.withStatement("SELECT id, status, reason FROM dead_letters ORDER BY seq") { statement in
                var rows: [(String, Int, String)] = []
                while try statement.step() {
                    rows.append((statement.string(at: 0), statement.int(at: 1), statement.string(at: 2)))
                }
                return rows.map { "\($0.0)|\($0.1)|\($0.2)" }
            }
        }
        #expect(letters.count == 2)
        for (letter, id) in zip(letters, rejected) {
            #expect(letter.hasPrefix("\(id)|400|HTTP 400: rejected event \(id)"))
        }
        #expect(try await engine.uploadStatistics().deadLettered == 2)
        await engine.close()
    }

    @Test("413: batches are split until they fit; a single event too large for the collector is dead-lettered")
    func payloadTooLargeSplits() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["max_bytes": 1_200])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 10, timerInterval: 3_600)
        try await engine.start()
        let ids = try recordEvents(engine, 12)
        let huge = try engine.record("huge", parameters: ["blob": .string(String(repeating: "y", count: 5_000))])
        try await engine.flush()
        expectDeliveredInOrder(ids, collector)
        #expect(collector.requests().contains { $0.status == 413 })
        guard case .recorded(let hugeID) = huge else {
            Issue.record("\(huge)")
            return
        }
        let status = try await engine.query { connection in
            try connection.withStatement("SELECT status FROM dead_letters WHERE id = ?") { statement in
                try statement.bind(hugeID, at: 1)
                return try statement.step() ? statement.int(at: 0) : nil
            }
        }
        #expect(status == 413)
        await engine.close()
    }

    @Test(
        "C2: other 4xx: the events are kept and held back, never dead-lettered, and go out once the collector takes them"
    )
    func otherClientErrorsHoldBack() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "status", "status": 403, "times": 1])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 10, timerInterval: 3_600)
        try await engine.start()
        let ids = try recordEvents(engine, 4)  // with session_start: 5, under the batch size
        await expectUploadDeferred { try await engine.flush() }
        #expect(try await engine.query { try $0.deadLetterCount() } == 0)
        #expect(try await engine.uploadStatistics().heldBack?.hasPrefix("HTTP 403") == true)
        let more = try recordEvents(engine, 3, prefix: "later")
        try await engine.flush()
        expectDeliveredInOrder(ids + more, collector)
        #expect(try await engine.uploadStatistics().heldBack == nil)
        await engine.close()
    }

    @Test("a hanging collector times out and the batch is retried")
    func hangingCollector() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "hang", "times": 1, "hang_seconds": 3])
        let engine = uploadingEngine(
            directory, collector: collector, batchSize: 5, timerInterval: 3_600, requestTimeout: 0.5)
        try await engine.start()
        let ids = try recordEvents(engine, 9)
        try await flushUntilDone(engine)
        expectDeliveredInOrder(ids, collector)
        #expect(collector.requests().first?.status == nil, "the first request got no answer")
        await engine.close()
    }

    @Test("a connection reset is retried")
    func connectionReset() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "reset", "times": 2])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 5, timerInterval: 3_600)
        try await engine.start()
        let ids = try recordEvents(engine, 9)
        try await flushUntilDone(engine)
        expectDeliveredInOrder(ids, collector)
        #expect(collector.requests().prefix(2).allSatisfy { $0.status == nil })
        await engine.close()
    }

    @Test("a collector that is down: events wait, then go out in order once it is back")
    func collectorDown() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        collector.stop()
        let clock = ManualClock()
        let engine = uploadingEngine(directory, collector: collector, batchSize: 5, timerInterval: 0.2, clock: clock)
        try await engine.start()
        let ids = try recordEvents(engine, 30)
        await expectUploadDeferred { try await engine.flush() }
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.pending == 31 && statistics.lastFailure != nil)
        // Automatic retries keep failing while the collector is down, each
        // after its backoff on the clock.
        for _ in 0..<3 {
            let failed = try await engine.uploadStatistics().failedRequests
            clock.advance(by: 1)
            #expect(try await waitUntil(asking: { try await engine.uploadStatistics().failedRequests > failed }))
        }
        #expect(try await engine.uploadStatistics().pending == 31)
        try await collector.restart()
        clock.advance(by: 1)
        #expect(
            await collector.waitFor(timeout: 10) {
                Set($0.filter { $0.status == 200 }.flatMap(\.ids)).isSuperset(of: ids)
            })
        expectDeliveredInOrder(ids, collector)
        await engine.close()
    }

    @Test("a flush requested during a flush is coalesced, not lost")
    func concurrentFlushesCoalesce() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let engine = uploadingEngine(directory, collector: collector, batchSize: 3, timerInterval: 3_600)
        try await engine.start()
        let ids = try recordEvents(engine, 40)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask { try await engine.flush() }
                group.addTask { engine.applicationDidEnterBackground() }
            }
            try await group.waitForAll()
        }
        try await engine.flush()
        expectDeliveredInOrder(ids, collector)
        // One flush at a time: every event went out once (no overlapping passes).
        let accepted = collector.acceptedIDs()
        #expect(accepted.count == Set(accepted).count)
        await engine.close()
    }

    @Test("close() gives up the upload lease, so another process uploads at once")
    func closeReleasesTheUploadLease() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let engine = uploadingEngine(directory, collector: collector, batchSize: 3, timerInterval: 3_600)
        try await engine.start()
        // A failed upload keeps the lease (the events wait for a retry); the
        // collector fails before any event can go out by size.
        try await collector.control(["mode": "status", "status": 503])
        _ = try recordEvents(engine, 5)
        await expectUploadDeferred { try await engine.flush() }
        let path = directory.defaultDataStoreURL.path
        func leaseOwner() throws -> String? {
            let connection = try Connection(path: path, options: ConnectionOptions())
            defer { connection.close() }
            return try connection.lease(of: "uploader")?.owner
        }
        #expect(try leaseOwner() != nil, "held while the engine runs")
        await engine.close()
        #expect(try leaseOwner() == nil)
    }
}
