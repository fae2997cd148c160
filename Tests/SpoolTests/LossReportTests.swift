import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// P5: loss that can be seen is reported — the high-water mark beside the
/// database counts committed events a lost WAL took, and a log missing
/// events it says it committed is found at open.
@Suite(.needsChildProcesses)
struct LossReportTests {
    @Test("P5: the WAL deleted after a SIGKILL: the events it took are reported missing, once, with their count")
    func walDeletedAfterAKill() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let path = directory.defaultDataStoreURL.path
        // 239 events and a session_start checkpointed into the file; then
        // 262 and a session_start committed to the WAL only.
        let child = try ProcessBoundaryTests.Child(
            [path, "wal", "--two-launches", "239", "262"], in: directory, name: "child")
        let acked = try await waitUntil(timeout: 60) {
            (try? String(contentsOf: child.output, encoding: .utf8))?.contains("ACKED") == true
        }
        child.sendSIGKILL()
        try #require(acked, "the child acknowledged its events")
        let wal = DatabaseFileCheck.fileSize(path + "-wal") ?? 0
        try #require(
            wal > 0 && wal < 4 << 20, "the second launch is in the WAL only, no checkpoint asked (\(wal) bytes)")

        // What was committed: a copy with its WAL. What the file keeps: a copy without.
        let withWAL = directory.file("with-wal.sqlite").path
        let withoutWAL = directory.file("without-wal.sqlite").path
        try FileManager.default.copyItem(atPath: path, toPath: withWAL)
        try FileManager.default.copyItem(atPath: path + "-wal", toPath: withWAL + "-wal")
        try FileManager.default.removeItem(atPath: path + "-wal")
        try FileManager.default.copyItem(atPath: path, toPath: withoutWAL)
        let committed = Int(try DamagedFiles.cli(withWAL, "SELECT last_seq FROM log_head")) ?? -1
        let kept = Int(try DamagedFiles.cli(withoutWAL, "SELECT count(*) FROM events")) ?? -1
        #expect(committed == 503 && kept == 240, "committed \(committed), kept \(kept)")
        // A durable listener that had none of them yet.
        try DamagedFiles.cli(path, "INSERT INTO consumers (id, position, updated_at) VALUES ('listener:away', 0, 0)")

        let engine = DamagedFiles.engine(directory, collector: collector)
        try await engine.start()
        #expect(engine.salvageReport == nil, "the file itself is whole")
        let counts = engine.diagnosticCounts
        #expect(counts.occurrences[.committedEventsMissing] == 1)
        #expect(counts.events[.committedEventsMissing] == committed - kept, "263: the second launch")
        let (positions, listener) = try await engine.query { connection in
            (
                try connection.scalarString("SELECT min(seq) || ' ' || max(seq) FROM events"),
                try connection.scalarString(
                    "SELECT position || ' ' || dropped FROM consumers WHERE id = 'listener:away'")
            )
        }
        #expect(
            positions == "\(committed - kept + 1) \(committed + 1)",
            "the kept events closed up under the mark's head, this launch's session_start after it")
        #expect(
            listener == "\(committed - kept) \(committed - kept)", "its position moved with them; the missing dropped")
        let (accepted, newID) = try await DamagedFiles.recordAndUpload(engine, collector: collector)
        #expect(accepted.count == kept + 2 && accepted.last == newID, "what was kept, a session_start, the new event")
        // W4: the collector hears of the missing events, once.
        #expect(WireLossTests.reported(collector)["wal_lost"] == committed - kept)
        await engine.close()
        // No position is handed out twice: the new events came after the
        // mark's head.
        #expect(try DamagedFiles.cli(path, "SELECT last_seq FROM log_head") == "\(committed + 2)")

        let again = DamagedFiles.engine(directory, collector: collector)
        try await again.start()
        #expect(again.diagnosticCounts.occurrences[.committedEventsMissing] == nil, "reported once")
        await again.close()
    }

    @Test("P5: a database the app deleted, leaving the mark beside it, is a new file, not a loss")
    func aDeletedDatabaseIsNoLoss() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        _ = try await DamagedFiles.queueFile(directory, collector: collector, events: 30)
        let path = directory.defaultDataStoreURL.path
        #expect(FileManager.default.fileExists(atPath: path + "-mark"))
        try FileManager.default.removeItem(atPath: path)
        let engine = DamagedFiles.engine(directory, collector: collector)
        try await engine.start()
        #expect(engine.diagnosticCounts.occurrences[.committedEventsMissing] == nil)
        #expect(engine.salvageReport == nil)
        await engine.close()
    }

    @Test("P5: events deleted from the log's tail: reported with salvage off, salvaged and counted lost with it on")
    func aMissingTailIsFound() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let ids = try await DamagedFiles.queueFile(directory, collector: collector, events: 40)
        let path = directory.defaultDataStoreURL.path
        try DamagedFiles.cli(path, "DELETE FROM events WHERE seq > 30")

        let reporting = DamagedFiles.engine(directory, collector: collector) { $0.salvagesDamagedDatabase = false }
        try await reporting.start()
        #expect(reporting.diagnosticCounts.events[.committedEventsMissing] == 11, "positions 31 to 41")
        #expect(reporting.salvageReport == nil)
        await reporting.close()
        try DamagedFiles.cli(path, "DELETE FROM events WHERE seq > 30")  // the session_start that launch added

        let salvaging = DamagedFiles.engine(directory, collector: collector)
        try await salvaging.start()
        let report = try #require(salvaging.salvageReport)
        #expect(
            report.recovered.events == 30 && report.lost.events == 12,
            "the 11, and the reporting launch's session_start")
        #expect(report.isComplete)
        let (accepted, newID) = try await DamagedFiles.recordAndUpload(salvaging, collector: collector)
        #expect(accepted.filter(ids.contains) == Array(ids.prefix(30)) && accepted.last == newID)
        // W4: the collector hears of the events the salvage lost, once.
        #expect(WireLossTests.reported(collector)["salvaged"] == 12)
        await salvaging.close()
    }
}
