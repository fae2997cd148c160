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
            database: .file(url), collectorURL: URL(string: "http://127.0.0.1:9/unused"),
            dispatcher: DefaultEventDispatcher(batchSize: 5_000, timerInterval: 3_600))
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
        let free = try #require(FreeSpace.available(at: url.path))
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
        #expect(try await engine.uploadStatistics().dropped == droppedBefore + 4_000 + frozen.events - after.events)
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
