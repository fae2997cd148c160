import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Dead letters put back (C5), the retention bound while a request is in
/// flight (C4) and the record of every request (C6), tried from outside.
extension CollectorBoundaryAdversaryTests {
    /// An engine (batch 100, no automatic retry) whose dead letters are the
    /// events of `bad` (indexes into the `count` recorded): returns it and the
    /// recorded ids.
    static func engineWithDeadLetters(
        _ directory: TemporaryDirectory, _ collector: TestCollector, count: Int, bad: [Int],
        maximumRetainedEvents: Int = 10_000, configure: (inout EngineConfiguration) -> Void = { _ in },
        before: (EventEngine) -> Void = { _ in }
    ) async throws -> (EventEngine, [String]) {
        // No timer pass (an hour): a loaded run can outlast the default 60 s.
        var configuration = uploadingConfiguration(
            directory, collector: collector, batchSize: 100, timerInterval: 3_600,
            maximumRetainedEvents: maximumRetainedEvents,
            requestTimeout: 30, retry: slowRetry, request: UploadRequestOptions(compression: .identity))
        configure(&configuration)
        let engine = EventEngine(configuration: configuration)
        before(engine)
        try await engine.start()
        let ids = try recordEvents(engine, count)
        try await engine.settle()
        try await collector.control(["reject_ids": bad.map { ids[$0] }])
        try await engine.flush()
        #expect(try await deadLetterIDs(engine) == bad.map { ids[$0] })
        try await collector.control(["reject_ids": [String]()])
        return (engine, ids)
    }

    /// How many 2xx answers each id got (a batch sent again under its
    /// Idempotency-Key counts each time it arrived).
    static func timesAccepted(_ collector: TestCollector) -> [String: Int] {
        collector.requests().filter { ($0.status ?? 0) / 100 == 2 }.flatMap(\.ids)
            .reduce(into: [:]) { $0[$1, default: 0] += 1 }
    }

    // MARK: - C5: putting dead letters back

    @Test("C5: dead letters put back while a request is in flight, and twice at once: each arrives exactly once")
    func requeueWhileInFlightAndTwiceAtOnce() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let (engine, ids) = try await Self.engineWithDeadLetters(directory, collector, count: 9, bad: [1, 4, 7])
        try await collector.control(["mode": "hold", "times": 1, "hang_seconds": 30])
        let queued = try recordEvents(engine, 5, prefix: "queued")
        try await engine.settle()
        let flushing = Task { try await engine.flush() }
        #expect(try await collector.waitForHeld())
        async let first = engine.requeueDeadLetters()
        async let second = engine.requeueDeadLetters()
        let (a, b) = try await (first, second)
        #expect(a + b == 3, "\(a) + \(b)")
        try await collector.control(["release": 200])
        _ = await flushing.result
        #expect(await Self.flushes(engine, 3))
        let times = Self.timesAccepted(collector)
        for id in [ids[1], ids[4], ids[7]] { #expect(times[id] == 1, "requeued \(id): \(times[id] ?? 0)") }
        #expect(queued.allSatisfy { times[$0] == 1 })
        #expect(try await Self.deadLetterIDs(engine).isEmpty)
        await engine.close()
    }

    @Test("C5: dead letters put back and then erased: the collector never gets them after eraseAllData")
    func requeueThenErase() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let (engine, ids) = try await Self.engineWithDeadLetters(directory, collector, count: 9, bad: [2, 5])
        try await collector.control(["path_status": ["/collect": 503]])
        #expect(try await engine.requeueDeadLetters() == 2)
        try await engine.eraseAllData()
        try await collector.control(["path_status": [String: Int]()])
        let fresh = try recordEvents(engine, 2, prefix: "fresh")
        #expect(await Self.flushes(engine, 3))
        let times = Self.timesAccepted(collector)
        #expect(times[ids[2]] == nil && times[ids[5]] == nil, "erased dead letters were uploaded")
        #expect(fresh.allSatisfy { times[$0] == 1 })
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.pending == 0 && statistics.deadLettered == 0)
        await engine.close()
    }

    @Test("C5, L3: a dead letter recorded before consent was withdrawn is not uploaded after consent returns")
    func requeueAfterConsentWasWithdrawn() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let (engine, ids) = try await Self.engineWithDeadLetters(directory, collector, count: 5, bad: [2])
        try await engine.withdrawConsent()
        engine.setConsent(true)
        let requeued = try await engine.requeueDeadLetters()
        let later = try recordEvents(engine, 1, prefix: "later")
        #expect(await Self.flushes(engine, 3))
        #expect(
            Self.timesAccepted(collector)[ids[2]] == nil,
            "an event recorded before the withdrawal was uploaded after it (requeued \(requeued))")
        #expect(Set(later).subtracting(collector.acceptedIDs()).isEmpty)
        await engine.close()
    }

    @Test(
        "C5, W5: dead letters put back while uploads are paused, with a batch due: no crash, nothing goes until resumeUploads(), then each arrives once"
    )
    func requeueWhilePaused() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let (engine, ids) = try await Self.engineWithDeadLetters(directory, collector, count: 9, bad: [0, 1, 2, 3, 4])
        try await engine.pauseUploads()
        // With the 5 put back, more than a batch (100) is pending: the
        // requeue's commit calls for a flush, and finds uploads paused.
        let queued = try recordEvents(engine, 97, prefix: "queued")
        try await engine.settle()
        let sent = collector.requests().count
        #expect(try await engine.requeueDeadLetters() == 5)
        #expect(try await engine.uploadStatistics().paused)
        try await engine.resumeUploads()
        try await flushUntilDone(engine)
        let later = collector.requests().dropFirst(sent)
        let times = later.filter { ($0.status ?? 0) / 100 == 2 }.flatMap(\.ids).reduce(into: [:]) {
            $0[$1, default: 0] += 1
        }
        #expect((Array(ids.prefix(5)) + queued).allSatisfy { times[$0] == 1 }, "each put back and queued event once")
        await engine.close()
    }

    @Test(
        "C5: dead letters put back up to the bound push no queued event out; back in the queue, they count toward the bound like any event"
    )
    func requeueFillingTheBound() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let (engine, ids) = try await Self.engineWithDeadLetters(
            directory, collector, count: 9, bad: [0, 1, 2, 3, 4], maximumRetainedEvents: 100)
        // Nothing goes while the queue fills: a request in flight when the
        // bound drops its oldest event would still deliver it (counted as
        // dropped, C4).
        try await engine.pauseUploads()
        let queued = try recordEvents(engine, 95, prefix: "queued")  // room for 5 more
        try await engine.settle()
        #expect(try await engine.requeueDeadLetters() == 5)
        #expect(try await engine.uploadStatistics().dropped == 0, "the requeue itself drops nothing")
        let next = try recordEvents(engine, 1, prefix: "next")
        try await engine.settle()
        try await engine.resumeUploads()
        _ = await Self.flushes(engine, 5)
        let times = Self.timesAccepted(collector)
        let lostQueued = queued.filter { times[$0] == nil }
        let statistics = try await engine.uploadStatistics()
        // The queue was full: the next event made the oldest give way (D4).
        #expect(
            lostQueued == [queued[0]] && statistics.dropped == 1,
            "queued events dropped: \(lostQueued.count), dropped \(statistics.dropped), requeued arrived \(ids.prefix(5).filter { times[$0] != nil }.count) of 5"
        )
        #expect(next.allSatisfy { times[$0] == 1 })
        await engine.close()
    }

    @Test(
        "C5, L10: a durable listener away while dead letters are put back catches up without them, and is not told of false drops"
    )
    func requeuedEventsAndADurableListenerAway() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let listener = CollectingListener()
        let (engine, _) = try await Self.engineWithDeadLetters(
            directory, collector, count: 5, bad: [2], maximumRetainedEvents: 100,
            before: { $0.events.addDurableObserver(listener, id: "away") })
        #expect(try await waitUntil { listener.customNames.count == 5 })
        engine.events.removeDurableObserver(id: "away")
        #expect(try await engine.requeueDeadLetters() == 1)
        try await engine.flush()
        // 120 more through a bound of 100: the oldest 21 after the listener's
        // position go, the requeued dead letter among them.
        _ = try recordEvents(engine, 120, prefix: "m")
        try await engine.settle()
        #expect(await Self.flushes(engine, 3))
        let missed = Protected(0)
        let back = CollectingListener()
        engine.events.addDurableObserver(back, id: "away", onMissed: { count in missed.withLock { $0 += count } })
        #expect(try await waitUntil { back.customNames.count >= 100 })
        #expect(!back.customNames.contains("e2"), "the dead letter is delivered again")
        #expect(back.customNames.first == "m20", "\(back.customNames.prefix(2))")
        #expect(
            missed.withLock { $0 } == 20,
            "told of \(missed.withLock { $0 }) missed events; 20 of its events were dropped")
        await engine.close()
    }

    @Test(
        "C5: dead letters put back while a second process records and uploads on the same file: each arrives once, nothing is lost"
    )
    func requeueWithASecondProcess() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let (engine, ids) = try await Self.engineWithDeadLetters(directory, collector, count: 20, bad: [3, 9, 15])
        let worker = try ProcessBoundaryTests.Child(
            [
                directory.defaultDataStoreURL.path, "w", "--worker", collector.url.absoluteString,
                "\(Date().timeIntervalSince1970 + 0.3)", "3",
            ], in: directory, name: "worker")
        #expect(
            try await waitUntil(timeout: 20) {
                ((try? String(contentsOf: worker.output, encoding: .utf8)) ?? "").contains("ACK ")
            })
        #expect(try await engine.requeueDeadLetters() == 3)
        #expect(try await engine.requeueDeadLetters() == 0)
        let mine = try recordEvents(engine, 10, prefix: "mine")
        let lines = await worker.finish(timeout: 60)
        #expect(lines.last == "DONE", "\(lines.suffix(3))")
        #expect(await Self.flushes(engine, 40))
        let times = Self.timesAccepted(collector)
        let acknowledged = lines.filter { $0.hasPrefix("ACK ") }.map { String($0.dropFirst(4)) }
        for id in [ids[3], ids[9], ids[15]] { #expect(times[id] == 1, "requeued: \(times[id] ?? 0)") }
        #expect((mine + acknowledged).filter { times[$0] == nil }.isEmpty)
        #expect(times.filter { $0.value > 1 }.isEmpty, "accepted twice: \(times.filter { $0.value > 1 }.count)")
        await engine.close()
    }

    // MARK: - C4: the retention bound while a request is in flight

    /// A full batch of 100 (session_start and 99) sent and held, then
    /// `newer` events recorded through a bound of 150. The request timeout
    /// outlasts the hold on a loaded machine.
    static func heldBatchOverTheBound(_ directory: TemporaryDirectory, newer count: Int) async throws -> (
        TestCollector, EventEngine, held: [String], newer: [String]
    ) {
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "hold", "times": 1, "hang_seconds": 30])
        let engine = uploadingEngine(
            directory, collector: collector, batchSize: 100, maximumRetainedEvents: 150, requestTimeout: 30,
            retry: fastRetry)
        try await engine.start()
        let held = try recordEvents(engine, 99)
        #expect(try await collector.waitForHeld())
        let newer = try recordEvents(engine, count, prefix: "newer")
        try await engine.settle()
        return (collector, engine, held, newer)
    }

    @Test(
        "C4: a request held while the bound drops all its events, then refused with 400: nothing dead-lettered, dropped counted once"
    )
    func heldRequestDroppedThenBadRequest() async throws {
        let directory = TemporaryDirectory()
        let (collector, engine, _, newer) = try await Self.heldBatchOverTheBound(directory, newer: 150)
        try await collector.control(["release": 400])
        #expect(await Self.flushes(engine, 40))
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.deadLettered == 0 && statistics.dropped == 100 && statistics.pending == 0)
        #expect(newer.allSatisfy { Self.timesAccepted(collector)[$0] == 1 })
        await engine.close()
    }

    @Test(
        "C4: a request held while the bound drops all its events, then accepted: dropped counted once, the newer all arrive"
    )
    func heldRequestDroppedThenAccepted() async throws {
        let directory = TemporaryDirectory()
        let (collector, engine, _, newer) = try await Self.heldBatchOverTheBound(directory, newer: 150)
        try await collector.control(["release": 200])
        #expect(await Self.flushes(engine, 40))
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.deadLettered == 0 && statistics.dropped == 100 && statistics.pending == 0)
        #expect(newer.allSatisfy { Self.timesAccepted(collector)[$0] == 1 })
        #expect(
            statistics.uploaded + statistics.dropped == 250,
            "250 recorded, the collector took \(Self.timesAccepted(collector).count): uploaded \(statistics.uploaded), dropped \(statistics.dropped)"
        )
        await engine.close()
    }

    @Test(
        "C4: a request held while the bound drops its first half, then refused with 400 for a dropped event: the kept half is taken once, nothing dead-lettered"
    )
    func heldRequestHalfDroppedRefusedForADroppedEvent() async throws {
        let directory = TemporaryDirectory()
        let (collector, engine, held, newer) = try await Self.heldBatchOverTheBound(directory, newer: 100)
        try await collector.control(["reject_ids": [held[10]], "release": 400])
        #expect(await Self.flushes(engine, 40))
        let times = Self.timesAccepted(collector)
        let kept = Array(held[49...])  // positions 51...100 survived the bound
        let twice = kept.filter { (times[$0] ?? 0) > 1 }
        #expect(
            twice.isEmpty,
            "kept events accepted twice: \(twice.count) of \(kept.count); requests \(collector.requests().count)")
        #expect((kept + newer).allSatisfy { times[$0] != nil })
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.deadLettered == 0 && statistics.dropped == 50)
        await engine.close()
    }

    @Test(
        "C4: a request held while the bound drops its first half, then refused with 400 for a kept event: only that event is dead-lettered"
    )
    func heldRequestHalfDroppedRefusedForAKeptEvent() async throws {
        let directory = TemporaryDirectory()
        let (collector, engine, held, newer) = try await Self.heldBatchOverTheBound(directory, newer: 100)
        try await collector.control(["reject_ids": [held[70]], "release": 400])
        #expect(await Self.flushes(engine, 40))
        #expect(try await Self.deadLetterIDs(engine) == [held[70]])
        let times = Self.timesAccepted(collector)
        #expect((Array(held[49...]) + newer).filter { $0 != held[70] && times[$0] == nil }.isEmpty)
        #expect(try await engine.uploadStatistics().dropped == 50)
        await engine.close()
    }
}
