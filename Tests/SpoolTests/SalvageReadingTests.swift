import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// P4: how a salvage reads a damaged file — row by row, stepping over pages
/// SQLite reports malformed — and what the fresh file holds.
@Suite(.needsChildProcesses)
struct SalvageReadingTests {
    @Test("P4: a garbage page in the middle of the events: the rows around it recovered, its rows counted lost")
    func aGarbagePageInTheMiddle() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let ids = try await DamagedFiles.queueFile(directory, collector: collector, events: 600)
        let path = directory.defaultDataStoreURL.path
        try DamagedFiles.cli(path, "INSERT INTO collectors (url, gzip_refused_at) VALUES ('https://c.example/v1', 1.5)")
        let page = try DamagedFiles.cli(
            path,
            "SELECT pageno || ' ' || ncell FROM dbstat WHERE name = 'events' AND pagetype = 'leaf' ORDER BY pageno LIMIT 1 OFFSET 4"
        ).split(separator: " ").compactMap { Int($0) }
        try #require(page.count == 2)
        let (number, cells) = (page[0], page[1])
        let handle = try FileHandle(forUpdating: directory.defaultDataStoreURL)
        try handle.seek(toOffset: UInt64((number - 1) * Connection.newFilePageSize))
        try handle.write(contentsOf: DamagedFiles.garbage(Connection.newFilePageSize))
        try handle.close()
        let damaged = try runProcess(try #require(DamagedFiles.sqlite3), [path, "SELECT count(*) FROM events"])
        try #require(damaged.error.contains("malformed"), "SQLite reports the page: \(damaged.error)")

        let outcome = try Salvager.salvage(path: path, options: ConnectionOptions(), mark: nil, date: Date())
        #expect(outcome.recognized && !outcome.complete)
        #expect(outcome.recovered.events == ids.count - cells && outcome.lost.events == cells)
        #expect(outcome.recovered.consumers == 1 && outcome.head == Int64(ids.count))

        let fresh = try DatabaseQueue(path: path)
        defer { fresh.close() }
        let (stored, uploader, collectors) = try fresh.sync { connection in
            (
                try connection.readEvents(after: 0, limit: .max),
                try connection.scalarString("SELECT position || ' ' || dropped FROM consumers WHERE id = 'uploader'"),
                try connection.scalarString("SELECT url || ' ' || gzip_refused_at FROM collectors")
            )
        }
        let lost = ids.filter { id in !stored.contains { $0.id == id } }
        #expect(lost.count == cells, "exactly the garbage page's rows")
        let first = try #require(lost.first.flatMap(ids.firstIndex(of:)))
        #expect(lost == Array(ids[first..<first + cells]), "one run of consecutive events")
        #expect(stored.map(\.id) == ids.filter { !lost.contains($0) }, "the rest, in order")
        #expect(stored.map(\.seq) == Array(Int64(cells + 1)...Int64(ids.count)), "positions close up to the head")
        #expect(
            uploader == "\(cells) \(cells)", "the uploader stands before the recovered events; the lost ones dropped")
        #expect(collectors == "https://c.example/v1 1.5", "the other tables come along")
        #expect(try DamagedFiles.cli(path, "PRAGMA integrity_check") == "ok")
        let bytesHeld = """
            SELECT (SELECT bytes_total FROM log_head) - (SELECT bytes_before FROM events ORDER BY seq LIMIT 1) \
            = (SELECT sum(length(CAST(name AS BLOB)) + length(CAST(parameters AS BLOB))) FROM events)
            """
        #expect(try DamagedFiles.cli(path, bytesHeld) == "1", "the byte bound counts what was recovered")
        #expect(try DamagedFiles.cli(outcome.copyPath, "PRAGMA page_count") != "", "the damaged copy is beside it")
    }

    @Test("P4: two processes opening a damaged file together: one salvages, the other waits and opens its result")
    func twoProcessesSalvageOnce() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let ids = try await DamagedFiles.queueFile(directory, collector: collector, events: 200)
        let path = directory.defaultDataStoreURL.path
        try DamagedFiles.cli(path, "PRAGMA user_version = 1")
        let startAt = Date().timeIntervalSince1970 + 1.5
        let children = try (0..<2).map { index in
            try ProcessBoundaryTests.Child(
                [path, "open\(index)", "--open", "\(startAt)"], in: directory, name: "open\(index)")
        }
        for child in children {
            let lines = await child.finish(timeout: 60)
            #expect(lines.contains("READY"), "\(lines)")
        }
        #expect(try DamagedFiles.copies(in: directory).count == 1, "one salvage")
        let stored = try DamagedFiles.cli(path, "SELECT id FROM events ORDER BY seq").split(separator: "\n").map(
            String.init)
        #expect(Array(stored.prefix(ids.count)) == ids, "every event once, in order, before the children's own")
        #expect(stored.count == ids.count + 2, "and each child's session_start")
    }
}
