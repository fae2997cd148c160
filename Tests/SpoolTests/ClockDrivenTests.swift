import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Timed behaviours read the engine's clock (``EngineConfiguration/clock``),
/// never the system's: each test here moves a ``ManualClock`` past a period
/// instead of waiting it out.
struct ClockDrivenTests {
    @Test("P6: free space is read again only once freeSpaceCheckInterval seconds of the engine's clock have passed")
    func freeSpaceIsReadAgainOnTheEnginesClock() async throws {
        let (directory, clock, os) = (TemporaryDirectory(), ManualClock(), FakeOS())
        os.freeSpace = 10
        let engine = try await startedEngine(directory) { configuration in
            configuration.platform = os
            configuration.clock = clock
            configuration.minimumFreeDiskSpace = 1_000_000
            configuration.freeSpaceCheckInterval = 60
        }
        func counted(_ kind: SpoolDiagnostic.Kind) -> Int { engine.diagnosticCounts.occurrences[kind] ?? 0 }
        // The first commit (start()'s session_start) reads the volume: nearly full.
        #expect(try await waitUntil { counted(.lowDiskSpace) == 1 })
        // Space comes back: within the interval nothing reads it again.
        os.freeSpace = 1 << 40
        clock.advance(by: 59)
        try engine.record("within the interval")
        try await engine.settle()
        #expect(counted(.diskSpaceRecovered) == 0)
        clock.advance(by: 1)
        try engine.record("after the interval")
        try await engine.settle()
        #expect(try await waitUntil { counted(.diskSpaceRecovered) == 1 })
        await engine.close()
    }

    @Test("D4: an event's age for maximumEventAge is measured on the engine's clock")
    func theAgeBoundFollowsTheEnginesClock() async throws {
        let (directory, clock) = (TemporaryDirectory(), ManualClock())
        let collector = try await TestCollector(directory)
        collector.stop()
        var configuration = uploadingConfiguration(directory, collector: collector, batchSize: 1_000, clock: clock)
        configuration.maximumEventAge = 3_600
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        let old = try recordEvents(engine, 5, prefix: "old")
        try await engine.settle()
        clock.advance(by: 3_600)
        let kept = try recordEvents(engine, 1, prefix: "at the bound")
        try await engine.settle()
        #expect(try await engine.uploadStatistics().droppedOverAge == 0, "an hour old is not older than an hour")
        clock.advance(by: 1)
        let fresh = try recordEvents(engine, 1, prefix: "fresh")
        try await engine.settle()
        let left = try await engine.query { try $0.readEvents(after: 0, limit: .max, now: 0).map(\.id) }
        #expect(left == kept + fresh)
        #expect(Set(left).isDisjoint(with: old))
        #expect(try await engine.uploadStatistics().droppedOverAge == 6, "5 events and the session_start")
        await engine.close()
    }

    @Test("P4: a damaged copy is deleted once damagedCopyRetention seconds of the engine's clock have passed")
    func aDamagedCopyExpiresOnTheEnginesClock() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        _ = try await DamagedFiles.queueFile(directory, collector: collector, events: 5)
        try DamagedFiles.cli(directory.defaultDataStoreURL.path, "PRAGMA user_version = 1")
        let salvagedAt = 1_700_000_000.0
        func start(at now: Double) async throws -> EventEngine {
            let engine = DamagedFiles.engine(directory, collector: collector) { $0.clock = ManualClock(now: now) }
            try await engine.start()
            await engine.close()
            return engine
        }
        let salvaging = try await start(at: salvagedAt)
        let copy = try #require(salvaging.salvageReport).damagedCopyPath
        let retention = EngineConfiguration(database: .inMemory).damagedCopyRetention
        _ = try await start(at: salvagedAt + retention - 1)
        #expect(FileManager.default.fileExists(atPath: copy), "within its retention")
        _ = try await start(at: salvagedAt + retention + 1)
        #expect(!FileManager.default.fileExists(atPath: copy), "past its retention")
        #expect(try DamagedFiles.copies(in: directory).isEmpty)
    }

    @Test("L3: a discard after consent is withdrawn that fails is tried again after a wait on the engine's clock")
    func aFailedDiscardIsRetriedOnTheEnginesClock() async throws {
        let (directory, clock) = (TemporaryDirectory(), ManualClock())
        let collector = try await TestCollector(directory)
        collector.stop()
        let discardFailures = Protected(0)
        var configuration = uploadingConfiguration(directory, collector: collector, clock: clock)
        configuration.diagnosticHandler = { diagnostic in
            if diagnostic.message.contains("could not be discarded") { discardFailures.withLock { $0 += 1 } }
        }
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        _ = try recordEvents(engine, 3)
        try await engine.settle()
        let head = try await engine.query { try $0.headPosition() }
        func failedDiscards() -> Int { discardFailures.withLock { $0 } }
        try await engine.query { try $0.execute("PRAGMA query_only = ON") }  // the discard's write fails
        engine.setConsent(false)
        #expect(try await waitUntil { failedDiscards() == 1 })
        #expect(try await waitUntil { clock.timersPending(dueIn: 0.1) == 1 }, "the retry waits 0.1 s of the clock")
        try await engine.query { try $0.execute("PRAGMA query_only = OFF") }
        clock.advance(by: 0.1)
        #expect(try await waitUntil { try await engine.query { try $0.position(of: Uploader.consumerID) } == head })
        #expect(failedDiscards() == 1)
        await engine.close()
    }

    @Test("a diagnostic is dated by the engine's clock")
    func aDiagnosticIsDatedByTheEnginesClock() async throws {
        let clock = ManualClock(now: 1_700_000_000)
        let handled = Protected<[SpoolDiagnostic]>([])
        let engine = try await startedEngine { configuration in
            configuration.clock = clock
            configuration.diagnosticHandler = { diagnostic in handled.withLock { $0.append(diagnostic) } }
        }
        engine.addMiddleware { _ in .drop(reason: "a test drops it") }
        clock.advance(by: 42)
        try engine.record("dropped")
        #expect(try await waitUntil { handled.withLock { !$0.isEmpty } })
        let diagnostic = try #require(handled.withLock { $0.first })
        #expect(diagnostic.kind == .eventDroppedByMiddleware)
        #expect(diagnostic.date == Date(timeIntervalSince1970: 1_700_000_042))
        await engine.close()
    }
}
