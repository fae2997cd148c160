import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// The collector boundary (C1–C3) tried from outside: bad events anywhere in
/// a batch, a collector that refuses everything, size limits and compression
/// negotiation, against the real collector process. Dead letters and the
/// retention bound in flight (C4, C5) are in
/// CollectorBoundaryAdversaryTests+Delivery.swift, the record of requests
/// (C6) in CollectorBoundaryAdversaryTests+Visibility.swift.
@Suite(.needsChildProcesses)
struct CollectorBoundaryAdversaryTests {
    /// No automatic retry during a test: every attempt is an explicit flush.
    static let slowRetry = RetryPolicy(initialDelay: 60, maximumDelay: 120)

    /// Records `count` events through an engine without a collector, on the
    /// file an uploading engine in `directory` uses, so that the collector
    /// can be told which ids to refuse before any upload starts. Returns
    /// every id in the file in log order (its session_start first).
    static func prefill(
        _ directory: TemporaryDirectory, _ count: Int, prefix: String = "e",
        parameters: (Int) -> [String: EventValue] = { ["i": .int($0)] }
    ) async throws -> [String] {
        let engine = EventEngine(
            configuration: EngineConfiguration(
                database: .file(directory.defaultDataStoreURL), maximumRetainedEvents: nil))
        try await engine.start()
        _ = try recordEvents(engine, count, prefix: prefix, parameters: parameters)
        try await engine.settle()
        let ids = try await engine.query { try $0.readEvents(after: 0, limit: .max, now: 0).map(\.id) }
        await engine.close()
        return ids
    }

    /// Up to `attempts` explicit flushes; true once one succeeds.
    static func flushes(_ engine: EventEngine, _ attempts: Int) async -> Bool {
        for _ in 0..<attempts {
            do {
                try await engine.flush()
                return true
            } catch {}
        }
        return false
    }

    static func deadLetterIDs(_ engine: EventEngine) async throws -> [String] {
        try await engine.query { connection in
            try connection.withStatement("SELECT id FROM dead_letters ORDER BY seq") { statement in
                var ids: [String] = []
                while try statement.step() { ids.append(statement.string(at: 0)) }
                return ids
            }
        }
    }

    // MARK: - C3: bad events anywhere in a batch

    struct BadEvents: Sendable, CustomTestStringConvertible {
        let batchSize: Int
        /// Events in the file before the uploading engine starts (that
        /// engine adds its own session_start at the end).
        let queued: Int
        /// Indexes into the queue of the events the collector refuses.
        let bad: [Int]
        var testDescription: String { "batch \(batchSize), queue \(queued), bad at \(bad)" }
    }

    static let badEventCases: [BadEvents] = [
        BadEvents(batchSize: 1, queued: 6, bad: [2]),
        BadEvents(batchSize: 1, queued: 6, bad: [2, 3]),
        BadEvents(batchSize: 1, queued: 6, bad: [0]),
        BadEvents(batchSize: 2, queued: 4, bad: [0]),
        BadEvents(batchSize: 2, queued: 4, bad: [1]),
        BadEvents(batchSize: 2, queued: 4, bad: [0, 1]),
        BadEvents(batchSize: 3, queued: 6, bad: [1]),
        BadEvents(batchSize: 3, queued: 6, bad: [0, 2]),
        BadEvents(batchSize: 7, queued: 14, bad: [3]),
        BadEvents(batchSize: 7, queued: 14, bad: [6]),
        BadEvents(batchSize: 7, queued: 14, bad: [1, 5]),
        BadEvents(batchSize: 7, queued: 14, bad: [0, 1]),
        BadEvents(batchSize: 100, queued: 200, bad: [10, 70]),
        BadEvents(batchSize: 100, queued: 200, bad: [40, 41]),
        BadEvents(batchSize: 100, queued: 200, bad: [0]),
        BadEvents(batchSize: 100, queued: 200, bad: [99]),
        BadEvents(batchSize: 100, queued: 200, bad: [0, 99]),
        BadEvents(batchSize: 100, queued: 200, bad: [0, 2]),
        BadEvents(batchSize: 100, queued: 200, bad: [100, 101]),
    ]

    @Test(
        "C3: bad events first, last, adjacent or in both halves: every good event arrives, exactly the bad ones are dead-lettered, about 2·log2(n) requests each",
        arguments: badEventCases)
    func badEventsAnywhereInABatch(_ shape: BadEvents) async throws {
        let directory = TemporaryDirectory()
        let ids = try await Self.prefill(directory, shape.queued - 1)
        let bad = shape.bad.map { ids[$0] }
        let collector = try await TestCollector(directory)
        try await collector.control(["reject_ids": bad])
        let engine = uploadingEngine(directory, collector: collector, batchSize: shape.batchSize, retry: Self.slowRetry)
        try await engine.start()
        let drained = await Self.flushes(engine, 3)
        let accepted = Set(collector.acceptedIDs())
        let stuck = ids.filter { !bad.contains($0) && !accepted.contains($0) }
        let dead = try await Self.deadLetterIDs(engine)
        let requests = collector.requests().count
        // One request per batch, the uncompressed retry of the first refused
        // gzip body per batch with a bad event, 2·⌈log2 n⌉ per bad event plus
        // its re-check when it was refused before anything was accepted, and
        // one request for the events after a batch that held no evidence.
        let batches = (shape.queued + shape.batchSize) / shape.batchSize
        let batchesWithBad = Set(shape.bad.map { $0 / shape.batchSize }).count
        let levels = Int((log2(Double(shape.batchSize))).rounded(.up))
        let bound = batches + batchesWithBad + bad.count * (2 * levels + 1) + 1
        let summary =
            "\(shape.testDescription): good not arrived \(stuck.count) of \(ids.count - bad.count), dead-lettered \(dead.count) (bad \(bad.count)), requests \(requests) (bound \(bound)), heldBack \(try await engine.uploadStatistics().heldBack ?? "nil")"
        print(summary)
        #expect(drained, "the queue drains: \(summary)")
        #expect(stuck.isEmpty, "every good event arrives: \(summary)")
        #expect(Set(dead) == Set(bad), "exactly the bad ones are dead letters: \(summary)")
        // Measured on a drain that ended; a held-back batch is bisected again at every attempt.
        #expect(!drained || requests <= bound, "bisection is bounded: \(summary)")
        await engine.close()
    }

    // MARK: - C2/C3: a collector that refuses everything

    @Test(
        "C3: a broken deploy answering 400 to everything: nothing dead-lettered, held back, about 2·log2(n) requests per attempt; then every event arrives"
    )
    func badRequestToEverything() async throws {
        let directory = TemporaryDirectory()
        let ids = try await Self.prefill(directory, 99)  // 100 events: one full batch
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "status", "status": 400])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 100, retry: Self.slowRetry)
        try await engine.start()
        // The start's own pass (a full batch is due) ends held back, after
        // about 20 requests (a while under the thread sanitizer).
        #expect(try await waitUntil(timeout: 60, asking: { try await engine.uploadStatistics().heldBack != nil }))
        // The collector logs a request after answering it: count once its
        // log has every request the engine made.
        func logged() async throws -> Int {
            let made = try await engine.uploadStatistics().requests
            #expect(try await waitUntil(timeout: 30) { collector.requests().count >= made })
            return collector.requests().count
        }
        let before = try await logged()
        await expectUploadDeferred { try await engine.flush() }
        let perAttempt = try await logged() - before
        print("400 to everything, batch 100: first attempt \(before) requests, next \(perAttempt)")
        // The gzip body, once uncompressed, then the bisection's budget
        // while nothing is accepted (2·⌈log2 100⌉ + 4).
        #expect(
            perAttempt <= 2 + Uploader.bisectionBudget(100),
            "requests per attempt: \(perAttempt) (first attempt: \(before))")
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.deadLettered == 0)
        #expect(statistics.heldBack?.contains("400") == true, "\(statistics.heldBack ?? "nil")")
        try await collector.control(["mode": "ok"])
        #expect(await Self.flushes(engine, 3))
        #expect(Set(ids).subtracting(collector.acceptedIDs()).isEmpty)
        #expect(try await Self.deadLetterIDs(engine).isEmpty)
        await engine.close()
    }

    @Test(
        "C3: a broken deploy refusing everything while events trickle in one at a time: none is dead-lettered",
        arguments: [400, 413, 422])
    func refusalOfEverythingOneEventAtATime(_ status: Int) async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let engine = uploadingEngine(directory, collector: collector, batchSize: 10, retry: Self.slowRetry)
        try await engine.start()
        let first = try recordEvents(engine, 1, prefix: "before")
        try await engine.flush()  // accepted: the collector works
        try await collector.control(["mode": "status", "status": status])
        let during = try recordEvents(engine, 1, prefix: "during")
        var threw = false
        do { try await engine.flush() } catch { threw = true }
        let dead = try await Self.deadLetterIDs(engine)
        #expect(
            dead.isEmpty,
            "a \(status) to a lone event right after an accepted request dead-letters it: \(dead.count), flush threw: \(threw)"
        )
        #expect(threw, "uploading is held back")
        try await collector.control(["mode": "ok"])
        let after = try recordEvents(engine, 1, prefix: "after")
        #expect(await Self.flushes(engine, 3))
        let missing = Set(first + during + after).subtracting(collector.acceptedIDs())
        #expect(missing.isEmpty, "\(missing.count) of 3 never arrived")
        await engine.close()
    }

    @Test(
        "C3: a deploy answering 400 to everything for its first k requests, ending during a bisection: no event is dead-lettered",
        arguments: Array(2...10))
    func badRequestWindowEndingMidBisection(_ k: Int) async throws {
        let directory = TemporaryDirectory()
        let ids = try await Self.prefill(directory, 99)
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "status", "status": 400, "times": k])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 100, retry: Self.slowRetry)
        try await engine.start()
        _ = await Self.flushes(engine, 3)
        let dead = try await Self.deadLetterIDs(engine)
        #expect(dead.isEmpty, "k = \(k): dead-lettered \(dead.map { ids.firstIndex(of: $0) ?? -1 }) (queue indexes)")
        #expect(Set(ids).subtracting(collector.acceptedIDs()).isEmpty)
        await engine.close()
    }

    // MARK: - 413

    @Test("C3: a 413 size limit with a bad event among the halves: only the bad event is dead-lettered")
    func sizeLimitAndABadEvent() async throws {
        let directory = TemporaryDirectory()
        let pad = String(repeating: "p", count: 300)
        let ids = try await Self.prefill(directory, 99, parameters: { ["i": .int($0), "pad": .string(pad)] })
        let collector = try await TestCollector(directory)
        // About 25 of these events fit in a request.
        try await collector.control(["max_bytes": 12_000, "reject_ids": [ids[60]]])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 100, retry: Self.slowRetry)
        try await engine.start()
        #expect(await Self.flushes(engine, 3))
        #expect(try await Self.deadLetterIDs(engine) == [ids[60]])
        let missing = Set(ids).subtracting(collector.acceptedIDs()).subtracting([ids[60]])
        #expect(missing.isEmpty, "\(missing.count) good events never arrived; requests \(collector.requests().count)")
        await engine.close()
    }

    @Test(
        "C3: one event over the collector's size limit, alone after an accepted request: dead-lettered with 413, the rest go on"
    )
    func oneHugeEventAlone() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["max_bytes": 5_000])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 10, retry: Self.slowRetry)
        try await engine.start()
        let small = try recordEvents(engine, 3)
        try await engine.flush()
        let huge = try recordEvents(
            engine, 1, prefix: "huge", parameters: { _ in ["pad": .string(String(repeating: "h", count: 8_000))] })
        try await engine.flush()
        #expect(try await Self.deadLetterIDs(engine) == huge)
        let later = try recordEvents(engine, 3, prefix: "later")
        try await engine.flush()
        #expect(Set(small + later).subtracting(collector.acceptedIDs()).isEmpty)
        #expect(collector.requests().last(where: { $0.ids == huge })?.status == 413)
        await engine.close()
    }

    // MARK: - C1: compression negotiation

    @Test(
        "C1: a plain JSON endpoint without gzip and with a bad event: the bad one alone is dead-lettered, gzip is tried at most once per batch, and not at all after a restart"
    )
    func plainJSONEndpointWithABadEvent() async throws {
        let directory = TemporaryDirectory()
        let ids = try await Self.prefill(directory, 199)  // two full batches of 100
        let collector = try await TestCollector(directory)
        try await collector.control(["plain_json": true, "reject_ids": [ids[30]]])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 100, retry: Self.slowRetry)
        try await engine.start()
        #expect(await Self.flushes(engine, 3))
        #expect(try await Self.deadLetterIDs(engine) == [ids[30]])
        #expect(Set(ids).subtracting(collector.acceptedIDs()).subtracting([ids[30]]).isEmpty)
        let requests = collector.requests()
        let gzipped = requests.filter { $0.content_encoding == "gzip" }.count
        #expect(gzipped <= 2, "gzip requests: \(gzipped)")
        #expect(requests.count <= 3 + 2 + 2 * 7, "requests: \(requests.count)")
        #expect(try await engine.uploadStatistics().compresses == false)
        await engine.close()

        let again = uploadingEngine(directory, collector: collector, batchSize: 100, retry: Self.slowRetry)
        try await again.start()
        let more = try recordEvents(again, 5, prefix: "later")
        try await again.flush()
        #expect(Set(more).subtracting(collector.acceptedIDs()).isEmpty)
        #expect(
            collector.requests().filter { $0.content_encoding == "gzip" }.count == gzipped, "no gzip after a restart")
        await again.close()
    }

    @Test("C1: 415 naming identity only: sent again uncompressed, remembered; after a restart no gzip request at all")
    func unsupportedMediaTypeNamingIdentity() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["refuse_gzip": true, "accept_encoding": "identity"])
        let turnedOff = Protected(0)
        var configuration = uploadingConfiguration(
            directory, collector: collector, batchSize: 10, retry: Self.slowRetry)
        configuration.diagnosticHandler = { if $0.kind == .compressionTurnedOff { turnedOff.withLock { $0 += 1 } } }
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        let ids = try recordEvents(engine, 5)
        try await engine.flush()
        #expect(Set(ids).subtracting(collector.acceptedIDs()).isEmpty)
        #expect(collector.requests().map(\.status) == [415, 200])
        #expect(try await waitUntil { turnedOff.withLock { $0 } == 1 })
        await engine.close()
        let again = uploadingEngine(directory, collector: collector, batchSize: 10, retry: Self.slowRetry)
        try await again.start()
        _ = try recordEvents(again, 3, prefix: "later")
        try await again.flush()
        #expect(collector.requests().filter { $0.content_encoding == "gzip" }.count == 1)
        await again.close()
    }

    @Test(
        "C1/C2: 415 whose Accept-Encoding lists gzip: held back, one request per attempt, no uncompressed loop, nothing dead-lettered"
    )
    func unsupportedMediaTypeThatAcceptsGzip() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["refuse_gzip": true, "accept_encoding": "gzip, identity"])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 10, retry: Self.slowRetry)
        try await engine.start()
        let ids = try recordEvents(engine, 5)
        for attempt in 1...3 {
            await expectUploadDeferred { try await engine.flush() }
            #expect(collector.requests().count == attempt)
        }
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.deadLettered == 0 && statistics.heldBack?.hasPrefix("HTTP 415") == true)
        #expect(statistics.compresses)
        try await collector.control(["refuse_gzip": false])
        try await engine.flush()
        #expect(Set(ids).subtracting(collector.acceptedIDs()).isEmpty)
        await engine.close()
    }
}
