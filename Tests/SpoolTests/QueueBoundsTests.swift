import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// The queue's byte and age bounds beside its count (D4): the oldest give
/// way, each bound's drops are counted and reported, and durable listeners
/// are told what they missed.
@Suite(.needsChildProcesses)
struct QueueBoundsTests {
    /// What the log holds, by the same measure the bound uses.
    static func queuedBytes(_ engine: EventEngine) async throws -> Int {
        try await engine.query {
            try $0.scalarInt(
                "SELECT coalesce(sum(length(CAST(name AS BLOB)) + length(CAST(parameters AS BLOB))), 0) FROM events")
        }
    }

    @Test("D4: past maximumQueueBytes the oldest events give way, counted as dropped over bytes and reported")
    func theByteBoundDropsTheOldest() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        collector.stop()  // nothing is uploaded: the queue only grows
        var configuration = uploadingConfiguration(directory, collector: collector, batchSize: 1_000)
        configuration.maximumQueueBytes = 20_000
        let reported = Protected(0)
        configuration.diagnosticHandler = { d in
            if d.kind == .eventsDropped { reported.withLock { $0 += d.eventCount } }
        }
        let engine = EventEngine(configuration: configuration)
        let missed = Protected(0)
        engine.events.addDurableObserver(CollectingListener(), id: "away") { count in missed.withLock { $0 += count } }
        try await engine.start()
        engine.events.removeDurableObserver(id: "away")  // it keeps its place, and misses what is dropped
        let pad = String(repeating: "b", count: 480)
        let ids = try recordEvents(engine, 200, parameters: { ["i": .int($0), "pad": .string(pad)] })
        try await engine.settle()
        let bytes = try await Self.queuedBytes(engine)
        #expect(bytes <= 20_000 && bytes > 19_000, "\(bytes) bytes queued")
        let kept = try await engine.query { try $0.readEvents(after: 0, limit: .max, now: 0).map(\.id) }
        #expect(kept == Array(ids.suffix(kept.count)), "the newest are kept, in order")
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.droppedOverBytes == 201 - kept.count)
        #expect(statistics.droppedOverCount == 0 && statistics.droppedOverAge == 0)
        #expect(statistics.dropped == 201 - kept.count)
        #expect(try await waitUntil { reported.withLock { $0 } == 201 - kept.count })
        engine.events.addDurableObserver(CollectingListener(), id: "away") { count in missed.withLock { $0 += count } }
        #expect(try await waitUntil { missed.withLock { $0 } == 201 - kept.count }, "told at its next attach")
        await engine.close()
    }

    @Test("D4: events older than maximumEventAge give way at the next commit, counted as dropped over age")
    func theAgeBoundDropsOldEvents() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        collector.stop()
        let configuration = uploadingConfiguration(directory, collector: collector, batchSize: 1_000)
        let first = EventEngine(configuration: configuration)
        try await first.start()
        let old = try recordEvents(first, 20, prefix: "old")
        try await first.settle()
        // Recorded two hours ago, as a device offline since would have them.
        _ = try await first.query { try $0.execute("UPDATE events SET recorded_at = recorded_at - 7200") }
        await first.close()

        var bounded = configuration
        bounded.maximumEventAge = 3_600
        let engine = EventEngine(configuration: bounded)
        try await engine.start()
        let fresh = try recordEvents(engine, 5, prefix: "fresh")
        try await engine.settle()
        let kept = try await engine.query { try $0.readEvents(after: 0, limit: .max, now: 0).map(\.id) }
        #expect(Set(kept).isDisjoint(with: old))
        #expect(Set(fresh).isSubset(of: kept))
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.droppedOverAge == 21, "20 events and the first session_start")
        #expect(statistics.droppedOverBytes == 0 && statistics.droppedOverCount == 0)
        await engine.close()
    }

    @Test("D4: a group's id counts against the byte bound, the same after a salvage, with and without encryption")
    func targetsCountAndSalvageAgrees() async throws {
        for encrypted in [false, true] {
            let directory = TemporaryDirectory()
            func configure(_ configuration: inout EngineConfiguration) {
                // try!: a fixed, valid key.
                if encrypted { configuration.encryption = .aesGCM(keyProvider: try! TestKeys("k1")) }
            }
            let engine = try await startedEngine(directory, configure: configure)
            let target = String(repeating: "G", count: 100_000)
            try engine.group(target)
            _ = try recordEvents(engine, 3)
            try await engine.settle()
            await engine.close()
            let path = directory.databaseURL.path
            let queued = "SELECT bytes_total - (SELECT min(bytes_before) FROM events) FROM log_head"
            let before = try #require(Int(try DamagedFiles.cli(path, queued)))
            #expect(before > target.utf8.count, "encrypted \(encrypted): the target counts (\(before) bytes)")
            // The head below the rows: the next start salvages the file.
            _ = try DamagedFiles.cli(path, "UPDATE log_head SET last_seq = 1")
            let salvaged = try await startedEngine(directory, configure: configure)
            #expect(salvaged.salvageReport != nil)
            await salvaged.close()
            let after = try #require(Int(try DamagedFiles.cli(path, queued)))
            // The salvaged start's session_start, and a sealed value's key id
            // and target header, besides.
            #expect(
                abs(after - before) < 100, "encrypted \(encrypted): \(before) bytes before the salvage, \(after) after")
        }
    }

    @Test("D4: the count bound's drops are counted apart from the others")
    func theCountBoundIsCountedApart() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        collector.stop()
        let engine = uploadingEngine(directory, collector: collector, batchSize: 50, maximumRetainedEvents: 100)
        try await engine.start()
        _ = try recordEvents(engine, 150)
        try await engine.settle()
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.droppedOverCount == 51 && statistics.dropped == 51)
        #expect(statistics.droppedOverBytes == 0 && statistics.droppedOverAge == 0)
        await engine.close()
    }

    @Test("0007 gives the events already queued their running byte total, so the byte bound counts them")
    func theMigrationCountsTheQueuedBytes() throws {
        let directory = TemporaryDirectory()
        let connection = try Connection(path: directory.databaseURL.path, options: ConnectionOptions())
        defer { connection.close() }
        let migrator = Migrator(migrations: Migration.embedded)
        try migrator.migrate(connection, upTo: 6)
        try connection.execute(
            """
            INSERT INTO events (id, name, parameters, recorded_at) VALUES
              ('0190a0a0-0000-7000-8000-000000000001', 'ab', '{"a":1}', 1700000000.5),
              ('0190a0a0-0000-7000-8000-000000000002', 'cde', '{"b":"é"}', 1700000000.6),
              ('0190a0a0-0000-7000-8000-000000000003', 'f', '{}', 1700000000.7);
            """)
        try migrator.migrate(connection)
        // 2 + 7, 3 + 10 (é is two bytes), 1 + 2.
        #expect(try connection.scalarString("SELECT group_concat(bytes_before) FROM events ORDER BY seq") == "0,9,22")
        #expect(try connection.scalarInt("SELECT bytes_total FROM log_head") == 25)
    }
}
