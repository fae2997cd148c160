import Foundation
import Testing

@_spi(TransportAuthoring) @testable import Spool
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
        let cells = try Self.overwriteLeaf(ofEvents: path, offset: 4)

        let outcome = try Salvager.salvage(path: path, options: ConnectionOptions(), mark: nil, date: Date())
        #expect(outcome.recognized && !outcome.complete)
        #expect(outcome.recovered.events == ids.count - cells && outcome.lost.events == cells)
        #expect(outcome.recovered.consumers == 1 && outcome.head == Int64(ids.count))

        let fresh = try DatabaseQueue(path: path)
        defer { fresh.close() }
        let (stored, uploader, collectors) = try fresh.sync { connection in
            (
                try connection.readEvents(after: 0, limit: .max, now: 0),
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

    @Test(
        "P4: a garbage page in the middle of the events, found at the first read after a successful open: salvaged while running; recording and uploading go on"
    )
    func aGarbagePageFoundWhileRunning() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let ids = try await DamagedFiles.queueFile(directory, collector: collector, events: 600)
        let path = directory.defaultDataStoreURL.path
        let cells = try Self.overwriteLeaf(ofEvents: path, offset: 4)

        let engine = DamagedFiles.engine(directory, collector: collector)
        try await engine.start()
        #expect(engine.salvageReport == nil, "start() reads the ends of the log only: the page is not found yet")
        let sessionStart = try await engine.query {
            try $0.readEvents(after: Int64(ids.count), limit: .max, now: 0).map(\.id)
        }
        try #require(sessionStart.count == 1, "this launch's session_start, committed past the damage")
        // The uploader's first read reaches the page; the flush that meets
        // it fails, and the file is salvaged on the database queue.
        let uploaded = try await waitUntil(timeout: 30, interval: 0.1) {
            do {
                try await engine.flush()
                return true
            } catch {
                return false
            }
        }
        try #require(uploaded, "uploading goes on after the salvage")
        let report = try #require(engine.salvageReport, "salvaged while running")
        #expect(report.lost.events == cells, "exactly the garbage page's rows")
        #expect(report.recovered.events == ids.count + 1 - cells, "the rest, this launch's session_start included")
        #expect(!report.isComplete)
        #expect(engine.diagnosticCounts.occurrences[.storeSalvaged] == 1)
        #expect(engine.diagnosticCounts.events[.storeSalvaged] == cells)
        #expect(try DamagedFiles.copies(in: directory).count == 1, "the damaged file set aside")
        #expect(try DamagedFiles.cli(path, "PRAGMA integrity_check") == "ok")

        let (accepted, newID) = try await DamagedFiles.recordAndUpload(engine, collector: collector)
        let lost = ids.filter { !accepted.contains($0) }
        #expect(lost.count == cells, "the collector has every event but the page's")
        let first = try #require(lost.first.flatMap(ids.firstIndex(of:)))
        #expect(lost == Array(ids[first..<first + cells]), "one run of consecutive events")
        #expect(accepted == ids.filter { !lost.contains($0) } + sessionStart + [newID], "in order, then the new event")
        await engine.close()
    }

    @Test(
        "P4: a damaged cell claiming a value past SQLite's length limit, met by the uploader (SQLITE_TOOBIG on a read): salvaged while running, only the page's rows lost"
    )
    func anOverlongValueFoundWhileRunning() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let ids = try await DamagedFiles.queueFile(directory, collector: collector, events: 1_500)
        let path = directory.defaultDataStoreURL.path
        let page = try DamagedPage(undamaged: path)
        let cell = try #require(page.firstDamagedCell)
        try page.damage(path, planting: DamagedPage.overlongCell(rowid: page.rowid(ofCell: cell)))

        let engine = DamagedFiles.engine(directory, collector: collector)
        try await engine.start()
        var metFirst: (any Error)?
        do { try await engine.flush() } catch { metFirst = error }
        guard case .sqlite(let failure) = metFirst as? SpoolError else {
            Issue.record("the first read fails on the page: \(String(describing: metFirst))")
            return
        }
        #expect(failure.resultCode == .tooBig, "\(failure)")
        let salvaged = try await waitUntil(timeout: 30, interval: 0.01) { engine.salvageReport != nil }
        try #require(salvaged, "salvaged while running")
        try await flushUntilDone(engine)
        let arrived = Set(collector.acceptedIDs())
        let missing = ids.filter { !arrived.contains($0) }
        #expect(!missing.isEmpty && Set(missing).isSubset(of: Set(ids[page.rows])), "only the page's rows")
        #expect(engine.salvageReport?.lost.events == missing.count)
        await engine.close()
    }

    @Test(
        "P4: garbage SQLite reads as a row past the log's head, with no error: damage, salvaged while running, and never an event"
    )
    func aRowPastTheHeadFoundWhileRunning() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        _ = try await DamagedFiles.queueFile(directory, collector: collector, events: 1_500)
        let path = directory.defaultDataStoreURL.path
        let seqs = try DamagedFiles.cli(path, "SELECT seq FROM events ORDER BY seq").split(separator: "\n")
            .compactMap { Int64($0) }
        let page = try DamagedPage(undamaged: path)
        let garbage = try #require(page.firstDamagedCell)
        try page.damage(path, planting: DamagedPage.minimalCell(rowid: UInt64(page.head) + 1_000_000))
        let engine = DamagedFiles.engine(directory, collector: collector)
        try await engine.start()
        // From two rows before the page (a seek the intact page before it
        // answers) through the cell past the head, and no further: SQLite
        // reads no garbage cell after it, so it reports nothing.
        let after = seqs[page.rows.lowerBound - 2]
        var read: [Int64]?
        do {
            read = try await engine.query { try $0.readEvents(after: after, limit: garbage + 2, now: 0).map(\.seq) }
        } catch {}
        #expect(read == nil, "the read fails; it returned \(read ?? [])")
        let salvaged = try await waitUntil(timeout: 30, interval: 0.01) { engine.salvageReport != nil }
        #expect(salvaged, "salvaged while running")
        await engine.close()
    }

    @Test(
        "P4: a salvage while running that cannot write its fresh file says why (salvageFailed); the damaged file stays in use"
    )
    func aFailedSalvageIsReported() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        _ = try await DamagedFiles.queueFile(directory, collector: collector, events: 600)
        let path = directory.defaultDataStoreURL.path
        _ = try Self.overwriteLeaf(ofEvents: path, offset: 4)
        let engine = DamagedFiles.engine(directory, collector: collector)
        try await engine.start()
        // The salvage builds its fresh file beside the damaged one: a folder
        // that takes no new entry makes it fail.
        let folder = URL(fileURLWithPath: path).deletingLastPathComponent()
        guard let undo = try PrivacyTests.makeReadOnly(folder) else {
            print("P4: no way to make a folder read-only here; the failed salvage is not checked")
            await engine.close()
            return
        }
        do { try await engine.flush() } catch {}  // its read meets the page
        let reported = try await waitUntil(timeout: 30, interval: 0.05) {
            engine.diagnosticCounts.occurrences[.salvageFailed] == 1
        }
        undo()
        #expect(reported, "the failed salvage is a diagnostic: \(engine.diagnosticCounts.occurrences)")
        #expect(engine.salvageReport == nil, "nothing was salvaged")
        #expect(try DamagedFiles.copies(in: directory).isEmpty, "no copy set aside")
        await engine.close()
    }

    @Test(
        "P4: a garbage page in the middle of the events, found by a durable listener catching up at start(): salvaged while running; the listener is told of the lost events and gets the others"
    )
    func aGarbagePageFoundByADurableListener() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let ids = try await DamagedFiles.queueFile(directory, collector: collector, events: 600)
        let path = directory.defaultDataStoreURL.path
        // A durable listener registered earlier that has not had any of them.
        try DamagedFiles.cli(path, "INSERT INTO consumers (id, position, updated_at) VALUES ('listener:kept', 0, 0)")
        // Past its first page of catch-up (256 events): it has delivered
        // some when it meets the damage, and the salvage renumbers them.
        let cells = try Self.overwriteLeaf(ofEvents: path, offset: 7)

        let engine = DamagedFiles.engine(directory, collector: collector)
        let listener = CollectingListener()
        let missed = Protected(0)
        engine.events.addDurableObserver(listener, id: "kept", onMissed: { count in missed.withLock { $0 += count } })
        try await engine.start()
        let delivered = {
            Set(listener.received.withLock { $0 }.filter { $0.name == "queued" }.compactMap { $0.parameters["i"] })
        }
        #expect(
            try await waitUntil(timeout: 30) { delivered().count == 600 - cells },
            "every event but the page's (some twice: at least once), got \(delivered().count)")
        let report = try #require(engine.salvageReport, "salvaged while running")
        #expect(report.lost.events == cells)
        #expect(missed.withLock { $0 } == cells, "told of exactly the page's events")
        #expect(try DamagedFiles.cli(path, "PRAGMA integrity_check") == "ok")

        let (accepted, newID) = try await DamagedFiles.recordAndUpload(engine, collector: collector)
        #expect(accepted.filter(ids.contains).count == ids.count - cells && accepted.last == newID)
        #expect(try await waitUntil { listener.names.last == "after_salvage" }, "delivery goes on")
        await engine.close()
    }

    @Test(
        "P4: a garbage page among the oldest events, found by the commit whose bound drops them: salvaged while running; the commit goes through"
    )
    func aGarbagePageFoundByACommit() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let ids = try await DamagedFiles.queueFile(directory, collector: collector, events: 600)
        let path = directory.defaultDataStoreURL.path
        let cells = try Self.overwriteLeaf(ofEvents: path, offset: 2)

        // No uploader (nothing reads the log) and a bound of 300 events: the
        // first commit (session_start) drops the oldest through position
        // 302, across the page. start() itself reads only the log's ends.
        var configuration = EngineConfiguration(database: .file(directory.defaultDataStoreURL))
        configuration.maximumRetainedEvents = 300
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        #expect(try await waitUntil(timeout: 30) { engine.salvageReport != nil }, "salvaged while running")
        let report = try #require(engine.salvageReport)
        #expect(report.lost.events == cells && report.recovered.events == ids.count - cells)
        #expect(engine.diagnosticCounts.occurrences[.commitFailed] ?? 0 >= 1, "the commit that met the page")
        #expect(engine.diagnosticCounts.occurrences[.storeSalvaged] == 1)
        #expect(
            try await waitUntil { engine.diagnosticCounts.occurrences[.commitRecovered] == 1 }, "then it went through")
        await engine.close()

        let uploading = DamagedFiles.engine(directory, collector: collector)
        try await uploading.start()
        let (accepted, newID) = try await DamagedFiles.recordAndUpload(uploading, collector: collector)
        #expect(
            accepted.count == ids.count - 302 + 3 && Array(accepted.prefix(ids.count - 302)) == Array(ids[302...]),
            "the events past the bound, both launches' session_start and the new event")
        #expect(accepted.last == newID)
        #expect(try await uploading.uploadStatistics().dropped == 302, "the page's events lost, the rest to the bound")
        await uploading.close()
    }

    @Test(
        "P4: a batch in flight while the file is salvaged is not settled by the old file's positions: it is read and sent again"
    )
    func aBatchInFlightDuringASalvage() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let ids = try await DamagedFiles.queueFile(directory, collector: collector, events: 600)
        let path = directory.defaultDataStoreURL.path
        let cells = try Self.overwriteLeaf(ofEvents: path, offset: 7)
        // A Kafka REST proxy that refuses one event of the first batch for
        // good: the answer names it by its place in the batch.
        let refused = ids[60]
        try await collector.control(["format": "kafka", "record_errors": [refused: ["code": 50002]]])

        /// The real transport, holding the first request until the gate opens.
        final class HeldTransport: UploadTransport {
            let gate = Gate()
            let http = HTTPTransport(requestTimeout: 5)
            func send(_ request: UploadRequest) async throws -> UploadResponse {
                await onOwnThread { [gate] in gate.pass() }
                return try await http.send(request)
            }
        }
        let transport = HeldTransport()
        let engine = DamagedFiles.engine(directory, collector: collector) { configuration in
            configuration.batchSize = 100
            configuration.uploadInterval = 600
            configuration.dispatcher = DefaultEventDispatcher(
                requestTimeout: 5, format: .kafkaREST, transport: transport)
        }
        try await engine.start()
        let flushing = Task { try await engine.flush() }
        #expect(try await waitUntil(timeout: 30) { transport.gate.reached }, "the first batch read and held")
        // Another read reaches the page: the file is salvaged (positions
        // closed up) while the first batch is in flight.
        await #expect(throws: SQLiteError.self) {
            try await engine.query { try $0.readEvents(after: 300, limit: 200, now: 0) }
        }
        #expect(try await waitUntil(timeout: 30) { engine.salvageReport != nil })
        transport.gate.open()
        _ = try? await flushing.value  // try?: the flush that held the batch fails (retryable); the next one settles it
        try await flushUntilDone(engine)

        let letters = try await engine.query { try $0.scalarString("SELECT group_concat(id) FROM dead_letters") }
        #expect(letters == refused, "the refused event, not the one at its old position in the fresh file")
        let lost = Set(ids).subtracting(collector.acceptedIDs()).subtracting([refused])
        #expect(lost.count == cells, "every event but the page's and the refused one reached the collector")
        await engine.close()
    }

    /// Writes garbage over the `offset`-th leaf page of the events table (in
    /// file order) and returns how many rows it held.
    static func overwriteLeaf(ofEvents path: String, offset: Int) throws -> Int {
        let page = try DamagedFiles.cli(
            path,
            "SELECT pageno || ' ' || ncell FROM dbstat WHERE name = 'events' AND pagetype = 'leaf' ORDER BY pageno LIMIT 1 OFFSET \(offset)"
        ).split(separator: " ").compactMap { Int($0) }
        try #require(page.count == 2)
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        try handle.seek(toOffset: UInt64((page[0] - 1) * Connection.newFilePageSize))
        try handle.write(contentsOf: DamagedFiles.garbage(Connection.newFilePageSize))
        try handle.close()
        let damaged = try runProcess(try #require(DamagedFiles.sqlite3), [path, "SELECT count(*) FROM events"])
        try #require(damaged.error.contains("malformed"), "SQLite reports the page: \(damaged.error)")
        return page[1]
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
