import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Requests a collector can deduplicate (W3): the batch id in
/// `Idempotency-Key` and the sends before in `X-Retry-Count`, against the
/// real test collector, which takes a batch once per key — after a lost
/// answer, and after a SIGKILL mid-request.
@Suite(.needsChildProcesses)
struct IdempotencyTests {
    @Test(
        "W3: an answer lost after the collector took the batch: the retry carries the same Idempotency-Key, X-Retry-Count 1, and the collector takes it once"
    )
    func lostAnswer() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "accept_lost", "times": 1, "hang_seconds": 30])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 100, timerInterval: 3_600)
        try await engine.start()
        let ids = try recordEvents(engine, 9)
        await expectUploadDeferred { try await engine.flush() }
        try await flushUntilDone(engine)
        // Every send of the batch (a loaded machine may time out more than
        // the first) carries its key and counts the sends before it; only
        // the first is taken.
        let requests = collector.requests()
        #expect(requests.count >= 2)
        let keys = requests.map { $0.header("Idempotency-Key") }
        #expect(keys[0] != nil && Set(keys).count == 1, "\(keys)")
        #expect(requests.map { $0.header("X-Retry-Count") } == requests.indices.map { String($0) })
        #expect(requests.map { $0.duplicate ?? false } == [false] + Array(repeating: true, count: requests.count - 1))
        let accepted = collector.acceptedIDs()
        #expect(accepted.count == 10 && Set(accepted).isSuperset(of: ids), "taken once")

        // The next batch is another key, and a first send.
        let more = try recordEvents(engine, 2, prefix: "next")
        try await engine.flush()
        let last = try #require(collector.requests().last)
        #expect(last.header("Idempotency-Key") != keys[0] && last.header("X-Retry-Count") == "0")
        #expect(Set(collector.acceptedIDs()).isSuperset(of: more))
        await engine.close()
    }

    @Test(
        "W3: the app's headers named Idempotency-Key, X-Retry-Count or X-Spool-Loss, in any case, never replace Spool's",
        arguments: ["headers", "headerProvider"])
    func appHeadersNeverReplaceSpools(source: String) async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["format": "segment", "write_key": "wk"])  // its requests carry X-Spool-Loss
        let app = ["idempotency-key": "the-app's-key", "X-RETRY-COUNT": "99", "x-spool-loss": "queue_count=0"]
        let options =
            source == "headers" ? UploadRequestOptions(headers: app) : UploadRequestOptions(headerProvider: { app })
        let engine = uploadingEngine(
            directory, collector: collector, batchSize: 2, format: try .segment(writeKey: "wk", anonymousId: "a"),
            request: options)
        try await engine.start()
        var recorded: [String] = []
        for round in 0..<6 {
            recorded += try recordEvents(engine, 2, prefix: "r\(round)_")
            try await flushUntilDone(engine)
        }
        let requests = collector.requests()
        #expect(requests.count >= 6)
        for (index, request) in requests.enumerated() {
            let (first, last) = (request.ids.first ?? "", request.ids.last ?? "")
            let key = request.ids.count == 1 ? first : first + "_" + last
            #expect(request.header("Idempotency-Key") == key, "the batch's own key: \(request.ids)")
            // A loaded machine may time a request out and send it again.
            let before = requests[..<index].filter { $0.header("Idempotency-Key") == key }.count
            #expect(request.header("X-Retry-Count") == String(before))
            #expect(request.header("X-Spool-Loss")?.hasPrefix("queue_count=0, queue_bytes=0") == true)
            #expect(before > 0 || request.duplicate != true, "a first send is never taken for a repeat")
        }
        #expect(Set(collector.acceptedIDs()).isSuperset(of: recorded))
        await engine.close()
    }

    @Test("W3: X-Retry-Count counts every earlier send of the batch, the requests of a bisection between them included")
    func retryCountAcrossABisection() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "status", "status": 400])  // refuses everything: nothing singled out
        let engine = uploadingEngine(directory, collector: collector, batchSize: 10, timerInterval: 3_600)
        try await engine.start()
        _ = try recordEvents(engine, 3)
        await expectUploadDeferred { try await engine.flush() }
        try await collector.control(["mode": "ok"])
        try await flushUntilDone(engine)
        let requests = collector.requests()
        let key = try #require(requests.first?.header("Idempotency-Key"))
        #expect(requests.filter { $0.header("Idempotency-Key") == key }.count >= 3, "sent, split, and sent again")
        for (index, request) in requests.enumerated() {
            let before = requests[..<index].filter { $0.header("Idempotency-Key") == request.header("Idempotency-Key") }
            #expect(request.header("X-Retry-Count") == String(before.count), "request \(index) of \(request.ids)")
        }
        await engine.close()
    }

    @Test(
        "W3, C3: a bisection's half taken with its answer lost: what the bisection decided is settled, and the half goes again under its key"
    )
    func bisectionHalfWithItsAnswerLost() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let engine = uploadingEngine(directory, collector: collector, batchSize: 8, timerInterval: 3_600)
        try await engine.start()
        try await engine.pauseUploads()
        let ids = try recordEvents(engine, 11)  // with the session_start, a batch of 8 and one of 4
        try await engine.settle()
        // e0 is refused wherever it goes; the right half of the first batch
        // (e3…e6) is taken, and its answer lost.
        try await collector.control(["reject_ids": [ids[0]], "lose_ids": [ids[5]: 1], "hang_seconds": 4])
        try await engine.resumeUploads()
        try await flushUntilDone(engine)
        var taken: [String: Int] = [:]
        for request in collector.requests() where request.taken {
            for id in request.acceptedIDs { taken[id, default: 0] += 1 }
        }
        #expect(taken.filter { $0.value > 1 }.isEmpty, "a collector deduplicating on the key takes each event once")
        #expect(taken[ids[0]] == nil && Set(ids.dropFirst()).isSubset(of: Set(taken.keys)))
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.deadLettered == 1 && statistics.pending == 0, "e0, refused alone after others were taken")
        await engine.close()
    }

    @Test("W3: a process killed mid-request: the next launch sends the batch under the same Idempotency-Key")
    func killedMidRequest() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "accept_lost", "times": 1, "hang_seconds": 30])
        let path = directory.databaseURL.path
        let child = try ProcessBoundaryTests.Child(
            [path, "killed", "--notifier", collector.url.absoluteString], in: directory, name: "killed")
        #expect(try await waitUntil(timeout: 30) { collector.requests().count == 1 }, "\(child.lines())")
        child.sendSIGKILL()
        let sent = try #require(collector.requests().first)
        let key = try #require(sent.header("Idempotency-Key"))

        // The next launch reads the same two events (session_start and the
        // one recorded) as its first batch.
        var configuration = EngineConfiguration(
            database: .file(directory.databaseURL), collectorURL: collector.url, batchSize: 2, uploadInterval: 3_600,
            dispatcher: DefaultEventDispatcher(requestTimeout: defaultRequestTimeout))
        configuration.retryPolicy = fastRetry
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        try await flushUntilDone(engine)
        // The batch again (taken already: a duplicate), then the new
        // launch's session_start.
        let requests = collector.requests().dropFirst()
        #expect(requests.first?.header("Idempotency-Key") == key)
        #expect(requests.filter { $0.header("Idempotency-Key") == key }.allSatisfy { $0.duplicate == true })
        #expect(collector.acceptedIDs().count == 3, "each event taken once")
        await engine.close()
    }

    @Test(
        "W3: events recorded after a refused request do not join its retry: the same events under the same key, in this process and after a relaunch"
    )
    func retryKeepsItsEvents() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "status", "status": 500, "times": 1])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 100, timerInterval: 3_600)
        try await engine.start()
        _ = try recordEvents(engine, 3)
        await expectUploadDeferred { try await engine.flush() }
        let refused = try #require(collector.requests().first)
        _ = try recordEvents(engine, 4, prefix: "after")
        try await flushUntilDone(engine)
        let requests = collector.requests()
        try #require(requests.count == 3, "the refused request, its retry, the new events")
        #expect(requests[1].header("Idempotency-Key") == refused.header("Idempotency-Key"))
        #expect(requests[1].ids == refused.ids && requests[1].header("X-Retry-Count") == "1")
        let next = requests[2]
        #expect(next.ids.count == 4)
        #expect(next.header("Idempotency-Key") != refused.header("Idempotency-Key"))

        // Refused, then the process ends; the next launch records before
        // it uploads (its session_start at least): the retry is the same.
        try await collector.control(["mode": "status", "status": 500, "times": 1])
        _ = try recordEvents(engine, 2, prefix: "second")
        await expectUploadDeferred { try await engine.flush() }
        let refusedAgain = try #require(collector.requests().last)
        await engine.close()
        let relaunched = uploadingEngine(directory, collector: collector, batchSize: 100, timerInterval: 3_600)
        try await relaunched.start()
        _ = try recordEvents(relaunched, 5, prefix: "relaunched")
        try await flushUntilDone(relaunched)
        let after = collector.requests().dropFirst(4)
        #expect(after.first?.header("Idempotency-Key") == refusedAgain.header("Idempotency-Key"))
        #expect(after.first?.ids == refusedAgain.ids)
        #expect(refusedAgain.ids.count == 2)
        let taken = Set(collector.acceptedIDs()).count
        #expect(taken == 4 + 4 + 2 + 6, "every event taken once")
        await relaunched.close()
    }

    @Test(
        "W3: a refused batch of batchSize events is sent again the same, under the same key, after a relaunch with another batchSize",
        arguments: [4, 2, 8])
    func fullBatchRetry(relaunchedBatchSize: Int) async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "status", "status": 500, "times": 1])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 4, timerInterval: 3_600)
        try await engine.start()
        // With its session_start, four events: the size trigger sends them.
        _ = try recordEvents(engine, 3)
        #expect(await collector.waitFor(timeout: 30) { !$0.isEmpty })
        let refused = try #require(collector.requests().first)
        #expect(refused.ids.count == 4)
        await engine.close()

        let relaunched = uploadingEngine(
            directory, collector: collector, batchSize: relaunchedBatchSize, timerInterval: 3_600)
        try await relaunched.start()
        _ = try recordEvents(relaunched, 3, prefix: "after")
        try await flushUntilDone(relaunched)
        let retry = try #require(collector.requests().dropFirst().first)
        #expect(retry.header("Idempotency-Key") == refused.header("Idempotency-Key"))
        #expect(retry.ids == refused.ids && retry.header("X-Retry-Count") == "0", "a first send in this process")
        #expect(Set(collector.acceptedIDs()).count == 8, "every event taken once, the relaunch's session_start too")
        await relaunched.close()
    }
}
