import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// W4: what the device lost reaches the collector — in Spool's body, or in
/// the `X-Spool-Loss` header of the other formats — in the next request it
/// accepts, once: a refused request loses no count, and the counts hold
/// across processes sharing the file and across a relaunch. Against the real
/// test collector, which logs what each request reports.
@Suite(.needsChildProcesses)
struct WireLossTests {
    /// The formats a request reports its loss in: Spool's in the body,
    /// Segment's (as every other format's) in the header.
    enum Format: String, CaseIterable, Sendable {
        case spool, segment

        var format: any BatchFormat {
            switch self {
            case .spool: return SpoolBatchFormat()
            // try!: a literal key and no context: nothing to refuse.
            case .segment: return try! SegmentBatchFormat(writeKey: "wk")
            }
        }

        var carrier: String { self == .spool ? "body" : "header" }
    }

    /// A collector reading `format`, and a started engine on a new file
    /// uploading to it in batches of 50 with a queue bound of 100.
    func started(_ format: Format, label: String = #function) async throws -> (
        TemporaryDirectory, TestCollector, EventEngine
    ) {
        let directory = TemporaryDirectory(label)
        let collector = try await TestCollector(directory)
        try await collector.control(["format": format.rawValue])
        let engine = uploadingEngine(
            directory, collector: collector, batchSize: 50, maximumRetainedEvents: 100, format: format.format)
        try await engine.start()
        return (directory, collector, engine)
    }

    /// Records `count` events while uploads are paused, so the queue's
    /// count bound (100) drops the oldest before anything is sent; then
    /// gives the collector `settings` and resumes (a pass starts at once).
    func overflow(
        _ engine: EventEngine, _ count: Int, then settings: [String: any Sendable] = [:], _ collector: TestCollector
    ) async throws {
        try await engine.pauseUploads()
        _ = try recordEvents(engine, count)
        try await engine.settle()
        if !settings.isEmpty { try await collector.control(settings) }
        try await engine.resumeUploads()
    }

    /// What the requests the collector took reported, summed by cause.
    static func reported(_ collector: TestCollector) -> [String: Int] {
        collector.requests().filter(\.taken).compactMap(\.loss).reduce(into: [:]) { sum, loss in
            sum.merge(loss, uniquingKeysWith: +)
        }
    }

    /// Counts the file holds for the collector and has not reported.
    static func counted(_ engine: EventEngine) async throws -> (counted: LossCounts, carried: Int) {
        try await engine.query {
            (try $0.countedLoss(), try $0.scalarInt("SELECT count(*) FROM upload_loss_carried"))
        }
    }

    @Test(
        "W4: what the queue's bound dropped reaches the collector in the next accepted request, once",
        arguments: Format.allCases)
    func boundDropReported(format: Format) async throws {
        let (directory, collector, engine) = try await started(format)
        defer { withExtendedLifetime(directory) {} }
        try await overflow(engine, 160, collector)
        let dropped = try await engine.uploadStatistics().droppedOverCount
        #expect(dropped == 61, "session_start and 160 events over a bound of 100")
        try await flushUntilDone(engine)

        let requests = collector.requests()
        #expect(collector.formatErrors().isEmpty, "\(collector.formatErrors())")
        #expect(requests.allSatisfy { $0.carrier == format.carrier })
        #expect(requests.first?.loss?["queue_count"] == dropped, "the first request reports it")
        #expect(requests.dropFirst().allSatisfy { $0.loss?.values.allSatisfy { $0 == 0 } == true }, "and no other")
        var expected = Dictionary(uniqueKeysWithValues: LossCause.allCases.map { ($0.rawValue, 0) })
        expected["queue_count"] = dropped
        #expect(Self.reported(collector) == expected)
        let (counted, carried) = try await Self.counted(engine)
        #expect(counted.isEmpty && carried == 0, "settled with the request")
        await engine.close()
    }

    @Test(
        "W4: a refused request loses no count: its retry carries the same counts, what was lost meanwhile follows, each reported once",
        arguments: Format.allCases)
    func refusedThenAccepted(format: Format) async throws {
        let (directory, collector, engine) = try await started(format)
        defer { withExtendedLifetime(directory) {} }
        try await overflow(engine, 160, then: ["mode": "status", "status": 500, "times": 1], collector)
        try await flushUntilDone(engine)
        var requests = collector.requests()
        try #require(requests.count >= 2)
        #expect(requests[0].status == 500 && requests[1].taken)
        #expect(requests[0].header("Idempotency-Key") == requests[1].header("Idempotency-Key"), "the same batch")
        #expect(requests[0].loss == requests[1].loss && requests[0].loss?["queue_count"] == 61, "the same counts")

        // Refused again (the queue is empty: 50 drops to report); meanwhile
        // the bound drops more, the refused request's events among them:
        // its counts and the new ones follow.
        try await overflow(engine, 150, then: ["mode": "status", "status": 503, "times": 1], collector)
        #expect(await collector.waitFor { $0.contains { $0.status == 503 } })
        try await overflow(engine, 120, collector)
        try await flushUntilDone(engine)
        requests = collector.requests()
        #expect(requests.contains { !$0.taken && $0.loss?["queue_count"] == 50 }, "a refused report")

        // While a request is in flight the bound drops more: those counts
        // outlive the request's acceptance (only what it carried comes off).
        // What the last request of the drain freed (the refused request's
        // counts, its events dropped) and no request carried yet: the batch
        // prepared while that request was in flight carried only what it did
        // not (W6), so these wait for the next request.
        let waiting = try await Self.counted(engine).counted[.queueCount]
        let sent = collector.requests().count
        try await overflow(engine, 150, then: ["mode": "hold", "hang_seconds": 30, "times": 1], collector)
        #expect(try await collector.waitForHeld())
        _ = try recordEvents(engine, 40, prefix: "meanwhile")
        try await engine.settle()
        try await collector.control(["release": 200])
        try await flushUntilDone(engine)
        let held = try #require(collector.requests().dropFirst(sent).first)
        #expect(
            held.taken && held.loss?["queue_count"] == 50 + waiting,
            "the held request reported the 50 dropped before it, and the \(waiting) waiting")
        let dropped = try await engine.uploadStatistics().droppedOverCount
        #expect(Self.reported(collector)["queue_count"] == dropped, "every drop reported, once")
        let (counted, carried) = try await Self.counted(engine)
        #expect(counted.isEmpty && carried == 0)
        #expect(collector.formatErrors().isEmpty, "\(collector.formatErrors())")
        await engine.close()
    }

    @Test(
        "W4: another process's drops, and a refused request's counts after a relaunch, are reported by the next accepted request"
    )
    func acrossProcessesAndRelaunch() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["format": "spool"])
        // A bound of 200 here: this process drops nothing.
        let first = uploadingEngine(directory, collector: collector, maximumRetainedEvents: 200)
        try await first.start()
        try await first.flush()  // session_start: the uploader's position is past it

        // Another process records into the file with a bound of its own.
        let child = try ProcessBoundaryTests.Child(
            [directory.defaultDataStoreURL.path, "loss", "--overflow", "100", "150"], in: directory, name: "child")
        #expect(await child.finish(timeout: 60).contains("DONE"))
        let dropped = try await first.uploadStatistics().droppedOverCount
        #expect(dropped == 51, "the child's session_start and 150 events over 100")

        // Refused: the request reports them; this launch ends.
        try await collector.control(["mode": "status", "status": 500])
        await expectUploadDeferred { try await first.flush() }
        await first.close()
        let refused = try #require(collector.requests().last)
        #expect(!refused.taken && refused.loss?["queue_count"] == dropped)

        // The next launch sends the same batch with the same counts.
        try await collector.control(["mode": "ok"])
        let second = uploadingEngine(directory, collector: collector, maximumRetainedEvents: 200)
        try await second.start()
        try await flushUntilDone(second)
        let taken = collector.requests().filter(\.taken)
        let retry = try #require(taken.first { $0.header("Idempotency-Key") == refused.header("Idempotency-Key") })
        #expect(retry.loss == refused.loss)
        #expect(Self.reported(collector)["queue_count"] == dropped, "reported once")
        let (counted, carried) = try await Self.counted(second)
        #expect(counted.isEmpty && carried == 0)
        await second.close()
    }

    @Test(
        "W4: requests starting at one event carry the same counts; two in flight never carry one count; settling takes off what was carried"
    )
    func carryingAndSettling() async throws {
        let engine = try await startedEngine()
        let steps = try await engine.query { connection in
            try connection.transaction { () -> [Int] in
                var steps: [Int] = []
                try connection.countLoss(.queueCount, 5)
                steps.append(try connection.lossToCarry(from: 10)[.queueCount])  // 5
                try connection.countLoss(.queueCount, 3)
                steps.append(try connection.lossToCarry(from: 10)[.queueCount])  // its retry: 5 again
                steps.append(try connection.lossToCarry(from: 20)[.queueCount])  // the next, in flight too: 3
                try connection.settleLoss(accepted: 10, through: 19)
                steps.append(try connection.countedLoss()[.queueCount])  // 3 left
                steps.append(try connection.lossToCarry(from: 20)[.queueCount])  // 3, as it was sent
                try connection.settleLoss(accepted: 20, through: 30)
                steps.append(try connection.countedLoss()[.queueCount])  // 0
                // A request refused, its events then settled otherwise: what
                // it carried goes in the next request.
                try connection.countLoss(.walLost, 4)
                steps.append(try connection.lossToCarry(from: 40)[.walLost])  // 4
                try connection.settleLoss(accepted: nil, through: 45)
                steps.append(try connection.lossToCarry(from: 46)[.walLost])  // 4
                return steps
            }
        }
        #expect(steps == [5, 5, 3, 3, 3, 0, 4, 4])
        await engine.close()
    }

    @Test("W4: an event dead-lettered is reported by the next accepted request")
    func deadLetterReported() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let engine = uploadingEngine(directory, collector: collector, batchSize: 10)
        try await engine.start()
        let ids = try recordEvents(engine, 8)
        try await collector.control(["reject_ids": [ids[3]]])
        try await flushUntilDone(engine)
        #expect(try await engine.uploadStatistics().deadLettered == 1)
        #expect(Self.reported(collector)["dead_lettered"] ?? 0 == 0, "reported by a later request")
        try engine.record("after")
        try await flushUntilDone(engine)
        #expect(collector.requests().last?.loss?["dead_lettered"] == 1)
        #expect(Self.reported(collector)["dead_lettered"] == 1)
        await engine.close()
    }
}
