import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// P8: a file a newer Spool migrated (an app rolled back to an older
/// version) is salvaged into this version's schema, not refused — with a real
/// newer schema made at the `sqlite3` prompt, and the real test collector.
@Suite(.needsChildProcesses)
struct NewerSchemaTests {
    static let latest = Migrator(migrations: Migration.embedded).latestVersion
    static var newer: Int { latest + 1 }

    /// What a newer version's next migration might do, applied by hand to a
    /// closed queue file: a column added to `events`, a table of its own,
    /// the migration recorded, and two events queued under the new schema
    /// (with the new column set) after the ones queued before it. Returns
    /// the ids of those two events.
    static func migrateAhead(_ path: String) throws -> [String] {
        let ids = ["0190f3a2-0000-7000-8000-00000000a001", "0190f3a2-0000-7000-8000-00000000a002"]
        let values = ids.enumerated().map { index, id in
            """
            ((SELECT last_seq FROM log_head) + \(index + 1), '\(id)', 'queued_by_newer', '{"n":\(index)}', \
            1767225600.5 + \(index), NULL, 0, 0, 0, 'track', NULL, NULL, NULL, 'spring')
            """
        }.joined(separator: ", ")
        try DamagedFiles.cli(
            path,
            """
            BEGIN IMMEDIATE;
            ALTER TABLE events ADD COLUMN campaign TEXT;
            CREATE TABLE experiments (id INTEGER PRIMARY KEY, name TEXT NOT NULL, variant TEXT NOT NULL) STRICT;
            INSERT INTO experiments (name, variant) VALUES ('onboarding', 'b');
            INSERT INTO schema_migrations (version, name, applied_at) \
            VALUES (\(newer), 'experiments', 1767225600.0);
            PRAGMA user_version = \(newer);
            INSERT INTO events (seq, id, name, parameters, recorded_at, session_id, priority, uploader_only, \
            bytes_before, type, target, identity_id, context_id, campaign) VALUES \(values);
            UPDATE log_head SET last_seq = (SELECT max(seq) FROM events), bytes_total = bytes_total + \
            (SELECT sum(length(name) + length(parameters)) FROM events WHERE campaign IS NOT NULL);
            COMMIT;
            """)
        return ids
    }

    @Test("P8: a newer schema is salvaged: its events are uploaded in order, and the newer file is set aside readable")
    func aNewerSchemaIsSalvaged() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let queued = try await DamagedFiles.queueFile(directory, collector: collector, events: 40)
        let path = directory.defaultDataStoreURL.path
        let ids = queued + (try Self.migrateAhead(path))
        let historyRows = Int(try DamagedFiles.cli(path, "SELECT count(*) FROM event_history")) ?? -1

        let engine = DamagedFiles.engine(directory, collector: collector)
        try await engine.start()
        let report = try #require(engine.salvageReport)
        #expect(
            report.recovered
                == SalvageReport.Rows(
                    events: ids.count, consumerPositions: 1, historyRows: historyRows, deadLetters: 0))
        #expect(report.lost == SalvageReport.Rows(events: 0, consumerPositions: 0, historyRows: 0, deadLetters: 0))
        #expect(report.isComplete && report.damagedCopyExpires)
        #expect(
            report.reason.contains("schema version \(Self.newer)") && report.reason.contains("\(Self.latest)"),
            "\(report.reason)")
        #expect(report.damagedCopyPath.hasPrefix(directory.url.path + "/OPTEventQueue.newer-"))
        #expect(report.damagedCopyPath.hasSuffix(".sqlite"))
        let diagnostics = engine.diagnosticCounts
        #expect(diagnostics.occurrences[.storeSalvaged] == 1 && diagnostics.events[.storeSalvaged] == 0)
        #expect(try DamagedFiles.cli(path, "PRAGMA user_version") == "\(Self.latest)", "this version's schema")

        // The newer file, as the newer version left it.
        let copy = report.damagedCopyPath
        #expect(try DamagedFiles.cli(copy, "PRAGMA user_version") == "\(Self.newer)")
        #expect(try DamagedFiles.cli(copy, "SELECT name || ':' || variant FROM experiments") == "onboarding:b")
        #expect(
            try DamagedFiles.cli(copy, "SELECT count(*) FROM events WHERE campaign = 'spring'") == "2")
        #expect(try DamagedFiles.cli(copy, "SELECT count(*) FROM events") == "\(ids.count)")

        let (accepted, newID) = try await DamagedFiles.recordAndUpload(engine, collector: collector)
        #expect(accepted.filter { ids.contains($0) } == ids, "every queued event uploaded once, in order")
        #expect(accepted.last == newID)
        #expect(collector.formatErrors().isEmpty)

        // Kept like a damaged copy: erasure deletes it.
        #expect(FileManager.default.fileExists(atPath: copy))
        try await engine.eraseAllData()
        await engine.close()
        #expect(try DamagedFiles.files(in: directory, startingWith: "OPTEventQueue.newer-").isEmpty)
    }

    @Test(
        "P8: a salvage leaves the batches handed to the system behind (their positions are the old file's); their events are uploaded again"
    )
    func handOffsStayBehind() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let queued = try await DamagedFiles.queueFile(directory, collector: collector, events: 10)
        let path = directory.defaultDataStoreURL.path
        try DamagedFiles.cli(
            path,
            """
            INSERT INTO background_transfers (batch_id, session, first_seq, last_seq, positions, event_count, \
            body_file, compressed, handed_at) SELECT 'b1', 'spool.test', min(seq), max(seq), \
            json_group_array(seq), count(*), 'b1.body', 1, 1767225600.0 FROM events;
            """)
        _ = try Self.migrateAhead(path)
        let engine = DamagedFiles.engine(directory, collector: collector)
        try await engine.start()
        #expect(engine.salvageReport != nil)
        #expect(try DamagedFiles.cli(path, "SELECT count(*) FROM background_transfers") == "0")
        let (accepted, _) = try await DamagedFiles.recordAndUpload(engine, collector: collector)
        #expect(Set(accepted).isSuperset(of: queued), "the events of the hand-off go out again")
        await engine.close()
    }

    @Test("P8: the newer copy is kept as a damaged copy is: one recognised copy in all, and it expires")
    func theNewerCopyIsBounded() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        _ = try await DamagedFiles.queueFile(directory, collector: collector, events: 5)
        let path = directory.defaultDataStoreURL.path
        _ = try Self.migrateAhead(path)
        func copies() throws -> [String] {
            try DamagedFiles.files(in: directory, startingWith: "OPTEventQueue.").filter {
                $0.hasSuffix(".sqlite") && $0 != "OPTEventQueue.sqlite"
            }
        }

        let rolledBack = DamagedFiles.engine(directory, collector: collector)
        try await rolledBack.start()
        let newer = URL(fileURLWithPath: try #require(rolledBack.salvageReport).damagedCopyPath).lastPathComponent
        await rolledBack.close()
        #expect(try copies() == [newer] && newer.hasPrefix("OPTEventQueue.newer-"))

        // A damaged file salvaged later: its copy is the one kept.
        try DamagedFiles.cli(path, "PRAGMA user_version = 1")
        let damaged = DamagedFiles.engine(directory, collector: collector)
        try await damaged.start()
        let copy = URL(fileURLWithPath: try #require(damaged.salvageReport).damagedCopyPath).lastPathComponent
        await damaged.close()
        #expect(try copies() == [copy] && copy.hasPrefix("OPTEventQueue.damaged-"))

        // A newer copy past its retention: a later start() deletes it.
        _ = try Self.migrateAhead(path)
        let again = DamagedFiles.engine(directory, collector: collector)
        try await again.start()
        await again.close()
        #expect(try copies().count == 1 && (try copies().first?.hasPrefix("OPTEventQueue.newer-") ?? false))
        let expiring = DamagedFiles.engine(directory, collector: collector) { $0.damagedCopyRetention = 0 }
        try await expiring.start()
        #expect(expiring.salvageReport == nil)
        await expiring.close()
        #expect(try copies().isEmpty)
    }
}
