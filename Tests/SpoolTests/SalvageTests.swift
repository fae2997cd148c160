import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// P4: a database file that cannot be used is salvaged, not refused — with
/// real damaged files, exact counts of what was recovered and lost, and
/// recording and uploading going on afterwards.
@Suite(.needsChildProcesses)
struct SalvageTests {
    typealias Rows = SalvageReport.Rows
    static let latest = Migrator(migrations: Migration.embedded).latestVersion

    @Test(
        "P4: 64 KiB of garbage is set aside, never expires and is deleted by an erasure; a fresh file takes its place")
    func garbageIsSetAside() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let path = directory.defaultDataStoreURL.path
        let garbage = DamagedFiles.garbage(65_536)
        try garbage.write(to: directory.defaultDataStoreURL)

        let engine = DamagedFiles.engine(directory, collector: collector)
        try await engine.start()
        let report = try #require(engine.salvageReport)
        #expect(report.recovered == Rows(events: 0, consumerPositions: 0, historyRows: 0, deadLetters: 0))
        #expect(report.lost == Rows(events: 0, consumerPositions: 0, historyRows: 0, deadLetters: 0))
        #expect(!report.isComplete && !report.damagedCopyExpires)
        #expect(report.reason == "it is not a SQLite database")
        #expect(report.damagedCopyPath.hasPrefix(directory.url.path + "/OPTEventQueue.unrecognized-"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: report.damagedCopyPath)) == garbage, "set aside as it was")
        #expect(engine.diagnosticCounts.occurrences[.storeSalvaged] == 1)

        let (accepted, newID) = try await DamagedFiles.recordAndUpload(engine, collector: collector)
        #expect(accepted.count == 2 && accepted.last == newID, "session_start and the new event")
        await engine.close()

        // Expired long ago, as far as a recognised copy goes: still kept.
        let later = DamagedFiles.engine(directory, collector: collector) { $0.damagedCopyRetention = 0 }
        try await later.start()
        #expect(later.salvageReport == nil, "the fresh file is fine")
        #expect(FileManager.default.fileExists(atPath: report.damagedCopyPath))
        // An erasure deletes it: it sat at the app's database path.
        try await later.eraseAllData()
        await later.close()
        #expect(!FileManager.default.fileExists(atPath: report.damagedCopyPath), "erased with the rest")
        #expect(DatabaseFileCheck.pageSize(path) == Connection.newFilePageSize)
    }

    @Test("P4: garbage behind a valid SQLite header is set aside; a fresh file takes its place")
    func garbageBehindAValidHeader() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        _ = try await DamagedFiles.queueFile(directory, collector: collector, events: 50)
        let url = directory.defaultDataStoreURL
        let damaged = try Data(contentsOf: url).prefix(100) + DamagedFiles.garbage(65_536 - 100)
        try damaged.write(to: url)

        let engine = DamagedFiles.engine(directory, collector: collector)
        try await engine.start()
        let report = try #require(engine.salvageReport)
        #expect(report.recovered == Rows(events: 0, consumerPositions: 0, historyRows: 0, deadLetters: 0))
        #expect(report.lost.events == 0 && !report.isComplete && !report.damagedCopyExpires)
        #expect(report.reason.hasPrefix("SQLite reports it damaged") || report.reason == "it is not a SQLite database")
        #expect(try Data(contentsOf: URL(fileURLWithPath: report.damagedCopyPath)) == damaged)
        let (accepted, newID) = try await DamagedFiles.recordAndUpload(engine, collector: collector)
        #expect(accepted.count == 2 && accepted.last == newID)
        await engine.close()
    }

    @Test("P4: user_version lowered below the tables: every row recovered, nothing lost, the queue uploads")
    func loweredUserVersion() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let ids = try await DamagedFiles.queueFile(directory, collector: collector, events: 120)
        let path = directory.defaultDataStoreURL.path
        let historyRows = Int(try DamagedFiles.cli(path, "SELECT count(*) FROM event_history")) ?? -1
        // Who each event was recorded for (I1), to compare after the salvage.
        let identityQuery = """
            SELECT e.type || ':' || i.anonymous_id FROM events AS e \
            JOIN identities AS i ON i.id = e.identity_id ORDER BY e.seq
            """
        let identities = try DamagedFiles.cli(path, identityQuery)
        #expect(identities.split(separator: "\n").count == 121)
        try DamagedFiles.cli(path, "PRAGMA user_version = 1")

        let engine = DamagedFiles.engine(directory, collector: collector)
        try await engine.start()
        let report = try #require(engine.salvageReport)
        #expect(report.recovered == Rows(events: 121, consumerPositions: 1, historyRows: historyRows, deadLetters: 0))
        #expect(report.lost == Rows(events: 0, consumerPositions: 0, historyRows: 0, deadLetters: 0))
        #expect(report.isComplete && report.damagedCopyExpires)
        #expect(
            report.reason.contains("user_version is 1, but migrations up to \(Self.latest) were applied"),
            "\(report.reason)")
        #expect(report.damagedCopyPath.hasPrefix(directory.url.path + "/OPTEventQueue.damaged-"))
        #expect(try DamagedFiles.cli(report.damagedCopyPath, "PRAGMA user_version") == "1", "the copy is as it was")
        let diagnostic = engine.diagnosticCounts
        #expect(diagnostic.occurrences[.storeSalvaged] == 1 && diagnostic.events[.storeSalvaged] == 0)
        // The recovered events, then this start's session_start.
        let after = try DamagedFiles.cli(path, identityQuery).split(separator: "\n")
        #expect(after.dropLast() == identities.split(separator: "\n")[...], "every event keeps its identity")
        #expect(after.last == "track:" + (try await engine.identity().anonymousId), "and the file its anonymous id")

        let (accepted, newID) = try await DamagedFiles.recordAndUpload(engine, collector: collector)
        #expect(accepted.filter { $0 != newID && !ids.contains($0) }.count == 1, "one new session_start")
        #expect(accepted.filter { ids.contains($0) } == ids, "every queued event uploaded once, in order")
        #expect(accepted.last == newID)
        await engine.close()
    }

    @Test("P4: a file cut in the middle of a page: the rows before the cut recovered, the rest counted lost")
    func truncatedMidPage() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let ids = try await DamagedFiles.queueFile(directory, collector: collector, events: 600)
        let path = directory.defaultDataStoreURL.path
        let lastPage = try DamagedFiles.cli(path, "SELECT name FROM dbstat ORDER BY pageno DESC LIMIT 1")
        try #require(lastPage == "events", "the file ends with an events page (\(lastPage))")
        let size = try #require(DatabaseFileCheck.fileSize(path))
        try #require(truncate(path, off_t(size - Connection.newFilePageSize / 2)) == 0)
        // What the sqlite3 CLI still reads as whole events, on a copy.
        let copy = directory.file("cli-copy.sqlite").path
        try FileManager.default.copyItem(atPath: path, toPath: copy)
        let readable = try DamagedFiles.cli(
            copy,
            """
            SELECT id FROM events WHERE typeof(id) = 'text' AND length(id) = 36 AND json_valid(parameters) \
            ORDER BY seq
            """
        ).split(separator: "\n").map(String.init)
        try #require(readable.count > 0 && readable.count < ids.count)

        let engine = DamagedFiles.engine(directory, collector: collector)
        try await engine.start()
        let report = try #require(engine.salvageReport)
        #expect(report.reason.hasPrefix("the file ends 8192 bytes into a page of 16384 bytes"), "\(report.reason)")
        #expect(report.recovered.events == readable.count)
        #expect(report.lost.events == ids.count - readable.count)
        #expect(report.recovered.consumerPositions == 1 && report.damagedCopyExpires)
        #expect(engine.diagnosticCounts.events[.storeSalvaged] == ids.count - readable.count)
        #expect(readable.allSatisfy(ids.contains) && readable.count < ids.count)
        // The uploader lost the cut events as drops, and its queue has no
        // gap: what it has pending is what was recovered, and this launch's
        // session_start.
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.dropped == ids.count - readable.count)
        #expect(statistics.pending == readable.count + 1)

        let (accepted, newID) = try await DamagedFiles.recordAndUpload(engine, collector: collector)
        #expect(
            accepted.filter { ids.contains($0) } == ids.filter { readable.contains($0) },
            "every recovered event uploaded once, in order")
        #expect(accepted.last == newID)
        await engine.close()
    }

    @Test(
        "P4: a file cut mid-page beside a WAL: salvaged when the WAL lacks the cut page, opened as it is when it holds it",
        arguments: [false, true])
    func truncatedMidPageBesideAWAL(walHoldsTheCutPage: Bool) async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let ids = try await DamagedFiles.queueFile(directory, collector: collector, events: 600)
        let path = directory.defaultDataStoreURL.path
        let lastPage = try DamagedFiles.cli(path, "SELECT name FROM dbstat ORDER BY pageno DESC LIMIT 1")
        try #require(lastPage == "events", "the file ends with an events page (\(lastPage))")
        // A commit left in the WAL (a process killed before its checkpoint):
        // to the consumers' page, or to the newest event, on the file's last page.
        let change =
            walHoldsTheCutPage
            ? "UPDATE events SET priority = 1 - priority WHERE seq = (SELECT max(seq) FROM events)"
            : "UPDATE consumers SET updated_at = updated_at + 1"
        let sqlite3 = try #require(DamagedFiles.sqlite3)
        try await runProcess(sqlite3, [path, ".dbconfig no_ckpt_on_close on", change])
        let wal = try #require(DatabaseFileCheck.fileSize(path + "-wal"))
        try #require(wal > 0, "the WAL holds the commit")
        let size = try #require(DatabaseFileCheck.fileSize(path))
        try #require(truncate(path, off_t(size - Connection.newFilePageSize / 2)) == 0)

        let engine = DamagedFiles.engine(directory, collector: collector)
        try await engine.start()
        let recovered: Int
        if walHoldsTheCutPage {
            #expect(engine.salvageReport == nil, "SQLite reads the whole page from the WAL")
            recovered = ids.count
        } else {
            let report = try #require(
                engine.salvageReport, "the cut page is not in the WAL: its rows would be read as zeros")
            #expect(
                report.reason.hasPrefix("the file ends 8192 bytes into a page of 16384 bytes"), "\(report.reason)")
            #expect(report.lost.events > 0 && report.recovered.events + report.lost.events == ids.count)
            recovered = report.recovered.events
        }
        let (accepted, newID) = try await DamagedFiles.recordAndUpload(engine, collector: collector)
        #expect(accepted.filter(ids.contains).count == recovered && accepted.last == newID)
        await engine.close()
    }

    @Test("P4: salvage off — start() throws a typed error at every launch and leaves the file untouched")
    func salvageOff() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        _ = try await DamagedFiles.queueFile(directory, collector: collector, events: 600)
        let url = directory.defaultDataStoreURL
        let path = url.path
        func startFails(_ matches: (any Error) -> Bool) async throws {
            let before = try Data(contentsOf: url)
            for _ in 0..<2 {
                let engine = DamagedFiles.engine(directory, collector: collector) { $0.salvagesDamagedDatabase = false }
                await #expect(performing: { try await engine.start() }, throws: matches)
                #expect(engine.salvageReport == nil)
                await engine.close()
            }
            #expect(try Data(contentsOf: url) == before, "untouched")
            #expect(
                try DamagedFiles.files(in: directory, startingWith: "OPTEventQueue.") == [
                    "OPTEventQueue.sqlite", "OPTEventQueue.sqlite-mark",
                ])
        }

        try DamagedFiles.cli(path, "PRAGMA user_version = 2")
        try await startFails { error in
            guard case SpoolError.schemaUnexplained(path, 2, let reason) = error else { return false }
            return reason == "user_version is 2, but migrations up to \(Self.latest) were applied"
        }
        try DamagedFiles.cli(path, "PRAGMA user_version = \(Self.latest)")

        let size = try #require(DatabaseFileCheck.fileSize(path))
        try #require(truncate(path, off_t(size - 100)) == 0)
        try await startFails { error in
            guard case SpoolError.damaged(path, let reason) = error else { return false }
            return reason.hasPrefix("the file ends 16284 bytes into a page of 16384 bytes")
        }

        try DamagedFiles.garbage(65_536).write(to: url)
        try await startFails { $0 as? SpoolError == .notADatabase(path: path) }
    }

    @Test("P4, P8: salvage off — a newer schema throws schemaTooNew at every launch, and the file is left untouched")
    func newerSchemaWithSalvageOff() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        _ = try await DamagedFiles.queueFile(directory, collector: collector, events: 10)
        let url = directory.defaultDataStoreURL
        _ = try NewerSchemaTests.migrateAhead(url.path)
        let before = try Data(contentsOf: url)
        for _ in 0..<2 {
            let engine = DamagedFiles.engine(directory, collector: collector) { $0.salvagesDamagedDatabase = false }
            await #expect(
                throws: SpoolError.schemaTooNew(
                    path: url.path, version: NewerSchemaTests.newer, latestKnown: Self.latest)
            ) {
                try await engine.start()
            }
            #expect(engine.salvageReport == nil)
            await engine.close()
        }
        #expect(try Data(contentsOf: url) == before, "untouched")
        #expect(
            try DamagedFiles.files(in: directory, startingWith: "OPTEventQueue.") == [
                "OPTEventQueue.sqlite", "OPTEventQueue.sqlite-mark",
            ], "no copy, no fresh file")
    }

    @Test(
        "P4: a damaged file in a read-only location still throws, and nothing is moved",
        .enabled(if: SmallFileSystem.canMount, "mounting a tmpfs needs root and CAP_SYS_ADMIN; skipped without them"))
    func readOnlyLocationStillThrows() async throws {
        let directory = TemporaryDirectory()
        let mount = try SmallFileSystem(at: directory.file("fs"), megabytes: 1)
        defer { mount.unmount() }
        let url = mount.url.appendingPathComponent("spool.sqlite")
        let garbage = DamagedFiles.garbage(65_536)
        try garbage.write(to: url)
        try mount.remountReadOnly()
        let engine = EventEngine(configuration: EngineConfiguration(database: .file(url)))
        await #expect(throws: SpoolError.self) { try await engine.start() }
        await engine.close()
        #expect(try Data(contentsOf: url) == garbage)
        #expect(try FileManager.default.contentsOfDirectory(atPath: mount.url.path) == ["spool.sqlite"])
    }

    @Test("P4: only the last damaged copy is kept; it expires, and erasure deletes it")
    func damagedCopiesAreBounded() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        _ = try await DamagedFiles.queueFile(directory, collector: collector, events: 5)
        let path = directory.defaultDataStoreURL.path
        var copies: [String] = []
        for round in 0..<2 {
            try DamagedFiles.cli(path, "PRAGMA user_version = 1")
            let engine = DamagedFiles.engine(directory, collector: collector)
            try await engine.start()
            copies.append(try #require(engine.salvageReport).damagedCopyPath)
            await engine.close()
            #expect(
                try DamagedFiles.copies(in: directory)
                    == [URL(fileURLWithPath: copies[round]).lastPathComponent], "round \(round): the last copy only")
        }
        #expect(copies[0] != copies[1])

        // Within its retention the copy stays; erasure removes it.
        let keeping = DamagedFiles.engine(directory, collector: collector)
        try await keeping.start()
        #expect(FileManager.default.fileExists(atPath: copies[1]))
        try await keeping.eraseAllData()
        #expect(try DamagedFiles.copies(in: directory).isEmpty)
        await keeping.close()

        // Past its retention a later start() deletes it.
        try DamagedFiles.cli(path, "PRAGMA user_version = 1")
        let salvaging = DamagedFiles.engine(directory, collector: collector)
        try await salvaging.start()
        await salvaging.close()
        #expect(try DamagedFiles.copies(in: directory).count == 1)
        let expiring = DamagedFiles.engine(directory, collector: collector) { $0.damagedCopyRetention = 0 }
        try await expiring.start()
        await expiring.close()
        #expect(try DamagedFiles.copies(in: directory).isEmpty)
    }
}
