import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// P6: on a nearly full volume the database file stops growing, with a real
/// small file system (a tmpfs) filled up and emptied again.
@Suite(.serialized)
struct FreeSpaceTests {
    @Test(
        "P6: below the free-space minimum the file stops growing and new events make the oldest give way; above it, service returns",
        .enabled(if: SmallFileSystem.canMount, "mounting a tmpfs needs root and CAP_SYS_ADMIN; skipped without them"))
    func theFileStopsGrowing() async throws {
        let directory = TemporaryDirectory()
        let mount = try SmallFileSystem(at: directory.file("fs"), megabytes: 24)
        defer { mount.unmount() }
        let url = mount.url.appendingPathComponent("spool.sqlite")
        var configuration = EngineConfiguration(
            database: .file(url), collectorURL: URL(string: "http://127.0.0.1:9/unused"), batchSize: 5_000,
            uploadInterval: 3_600, dispatcher: DefaultEventDispatcher())
        configuration.minimumFreeDiskSpace = 6_000_000
        configuration.freeSpaceCheckInterval = 0
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        let pad = EventValue.string(String(repeating: "p", count: 1_000))
        func record(_ count: Int, _ label: String) async throws {
            for index in 0..<count {
                #expect(try engine.record(label, parameters: ["i": .int(index), "pad": pad]) != .droppedOptedOut)
            }
            try await engine.settle()
        }
        func stored() async throws -> (events: Int, pages: Int) {
            try await engine.query { connection in
                (
                    try connection.scalarInt("SELECT count(*) FROM events"),
                    try connection.scalarInt("PRAGMA page_count")
                )
            }
        }
        func counted(_ kind: SpoolDiagnostic.Kind) -> Int { engine.diagnosticCounts.occurrences[kind] ?? 0 }

        try await record(300, "roomy")
        #expect(counted(.lowDiskSpace) == 0)
        #expect(try await stored().events == 301)

        // Fill the volume to 3 MB free: below the 6 MB minimum.
        let free = try #require(SystemPlatform.shared.availableSpace(at: url.path))
        let filler = mount.url.appendingPathComponent("filler")
        try Data(count: Int(free) - 3_000_000).write(to: filler)
        try await record(1, "tight")
        #expect(try await waitUntil { counted(.lowDiskSpace) == 1 })
        let frozen = try await stored()
        let droppedBefore = try await engine.uploadStatistics().dropped

        // Commits of at most 100 events: a group is written before the
        // oldest give way, so the file may grow by one group's pages. The
        // first thousand settle the churn at both ends of the log (a few
        // pages on the freelist); from then on the log does not grow.
        for _ in 0..<10 { try await record(100, "tight") }
        let settled = try await stored()
        #expect(settled.pages <= frozen.pages + 16, "\(frozen.pages) → \(settled.pages) pages")
        for _ in 0..<30 { try await record(100, "tight") }
        let after = try await stored()
        // Frozen by count and by bytes: events of a few bytes more can keep
        // one or two fewer.
        #expect(
            (frozen.events - 2...frozen.events).contains(after.events), "each new event made the oldest give way")
        // The history may still fill up to 1,024 rows (the writer's pruning
        // step) and the freelist shift by a page or two before the frozen
        // bound holds: a few pages, where the 3,000 events would take about
        // 200 of 16 KiB if the file still grew.
        #expect(after.pages <= settled.pages + 8, "the file stopped growing: \(settled.pages) → \(after.pages) pages")
        let dropped = try await engine.uploadStatistics().dropped
        #expect(dropped == droppedBefore + 4_000 + frozen.events - after.events)
        // W4: what the frozen bounds dropped waits for the collector as the
        // free-space guard's loss, not the queue bound's.
        let lost = try await engine.query { try $0.countedLoss() }
        #expect(lost[.freeSpace] == dropped - droppedBefore)
        #expect(lost[.queueCount] + lost[.queueBytes] == droppedBefore)
        #expect(counted(.lowDiskSpace) == 1 && counted(.diskSpaceRecovered) == 0)

        // Space comes back: the configured bound again.
        try FileManager.default.removeItem(at: filler)
        try await record(1, "roomy_again")
        #expect(try await waitUntil { counted(.diskSpaceRecovered) == 1 })
        let recovered = try await stored().events
        try await record(200, "roomy_again")
        #expect(try await stored().events == recovered + 200, "nothing gives way any more")
        await engine.close()
    }
}

extension FreeSpaceTests {
    @Test(
        "P6: on a full disk a drain's shrink runs while the writer retries, and the space it gives back lets the buffered events commit",
        .enabled(if: SmallFileSystem.canMount, "mounting a tmpfs needs root and CAP_SYS_ADMIN; skipped without them"))
    func aShrinkIsNotHeldBackByAFailingWriter() async throws {
        let directory = TemporaryDirectory()
        let mount = try SmallFileSystem(at: directory.file("fs"), megabytes: 32)
        defer { mount.unmount() }
        let path = mount.url.appendingPathComponent("spool.sqlite").path
        // The shrink's timer and the writer's retries run when the test says.
        let clock = ManualClock()
        let database = try DatabaseQueue(path: path, options: ConnectionOptions(clock: clock))
        // Room for the whole group while its commits fail.
        let log = EventLog(database: database, limits: EventLog.Limits(events: 1_000, bytes: 16 << 20))
        log.shrinkDelay = 1
        let failures = Protected((commits: 0, codes: Set<SQLiteError.ResultCode>(), shrinks: [String]()))
        log.setFailureHandler { failure in
            switch failure {
            case .commitFailed(let error, _):
                failures.withLock {
                    $0.commits += 1
                    if let code = (error as? SQLiteError)?.resultCode { $0.codes.insert(code) }
                }
            case .shrinkFailed(let error): failures.withLock { $0.shrinks.append("\(error)") }
            default: break
            }
        }
        // An event fills a 16 KiB page.
        let json = "{\"pad\":\"" + String(repeating: "x", count: 15_000) + "\"}"
        func append(_ count: Int) throws -> [AppendReceipt] {
            try (0..<count).map { _ in try log.append(EventRecord(name: "big", parametersJSON: json, recordedAt: 1)) }
        }
        // -1 when the WAL cannot be read: never mistaken for a truncated one.
        func walBytes() -> Int {
            (try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? -1
        }
        func pages() async throws -> (count: Int, free: Int) {
            try await database.run { (try $0.scalarInt("PRAGMA page_count"), try $0.freePageCount()) }
        }

        // 10 MB of events. The idle writer asks for a shrink (the WAL passed
        // its checkpoint threshold), which truncates the WAL (a shrink that
        // meets the background checkpoint tries again a second later).
        _ = try append(600)
        try await log.waitUntilAllDurable()
        #expect(try await waitUntil { clock.timersPending(dueIn: 1) == 1 }, "no shrink was asked for")
        #expect(
            try await waitUntil {
                clock.advance(by: 1)
                return walBytes() == 0
            }, "the WAL still holds \(walBytes()) bytes")
        // Drained: the file keeps 10 MB of free pages.
        try await database.run { connection in
            try connection.execute("DELETE FROM events")
            try connection.truncateWAL()
        }
        let drained = try await pages()
        #expect(drained.free >= 600, "\(drained)")

        // 512 KiB left on the volume: a group of 1.6 MB does not fit in the
        // WAL (the free pages inside the file do not help a WAL that must
        // grow). The shrink needs only a few pages of WAL: its steps stay
        // within the page cache, so the pages they free are never written.
        let free = try #require(SystemPlatform.shared.availableSpace(at: path))
        let filler = mount.url.appendingPathComponent("filler")
        try Data(count: Int(free) - 512 << 10).write(to: filler)
        // One group: the queue is held while it is appended.
        let hold = DispatchSemaphore(value: 0)
        database.async { _ in hold.wait() }
        let group = try append(100)
        hold.signal()
        #expect(try await waitUntil { failures.withLock { $0.commits } >= 1 }, "the group committed")
        #expect(failures.withLock { $0.codes } == [.full])
        #expect(try await waitUntil { clock.timersPending(dueIn: 0.05) == 1 }, "the writer is not retrying")

        // The shrink comes while the writer retries: the retry due first
        // fails again, and the shrink runs anyway.
        log.scheduleShrink()
        clock.advance(by: 1)
        let committed = try await waitUntil(timeout: 10) {
            clock.advance(by: 1)
            return try await log.readEvents(after: 600, limit: 1_000).map(\.id) == group.map(\.id)
        }
        #expect(committed, "the group is still buffered after \(failures.withLock { $0.commits }) failed commits")
        let (commits, shrinks) = failures.withLock { ($0.commits, $0.shrinks) }
        #expect(commits >= 2 && shrinks == [], "\(commits) failed commits; shrinks failed: \(shrinks)")
        // The free pages went back to the file system before the group
        // committed: it did not reuse them (the file would keep its 617
        // pages), the file grew again from its live pages.
        let after = try await pages()
        #expect(after.count < drained.count - 32, "drained \(drained), then \(after)")
        try FileManager.default.removeItem(at: filler)  // the last attempt at close cannot fail
        await log.close()
        database.close()
    }
}
