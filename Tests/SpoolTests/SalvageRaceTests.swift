import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// P7: a salvage while running loses only the damaged page's rows — not the
/// readable rows after it, nor the events `recordDurably` acknowledged just
/// before it — whichever read meets the page, and whenever.
@Suite(.needsChildProcesses)
struct SalvageRaceTests {
    /// Who meets the damaged page first: the uploader, a durable listener
    /// catching up, or a read on the database queue between two commits.
    enum Meeter: CaseIterable { case uploader, durableListener, reader }
    /// When the 100 durable events are recorded: before the page is met,
    /// while it is, or after.
    enum Timing: CaseIterable { case before, during, after }

    static let repetitions = 54
    static let queued = 1_500

    @Test(
        "P7: 54 running salvages of a file with a garbage page in the middle (met by the uploader, a durable listener or a read between commits, before, while or after 100 durable events commit): only the page's rows are lost"
    )
    func onlyThePagesRowsAreLost() async throws {
        let directory = TemporaryDirectory()
        let ids = try await DamagedFiles.queueFile(
            directory, collector: try await TestCollector(directory), events: Self.queued)
        let path = directory.defaultDataStoreURL.path
        let base = directory.file("undamaged.sqlite").path
        try FileManager.default.copyItem(atPath: path, toPath: base)
        let page = try DamagedPage(undamaged: base)
        let pageIDs = Set(ids[page.rows])
        var lostCounts: [Int] = []
        for repetition in 0..<Self.repetitions {
            let meeter = Meeter.allCases[repetition % 3]
            let timing = Timing.allCases[(repetition / 3) % 3]
            // Every other file also holds a cell SQLite reads through, with a
            // rowid past the log's head: the garbage that ended the forward
            // read of the file in the report.
            let readThrough = repetition % 2 == 1
            let label = "repetition \(repetition): \(meeter), recording \(timing), read-through cell \(readThrough)"
            try Self.reset(directory, from: base)
            if meeter == .durableListener {
                try DamagedFiles.cli(
                    path, "INSERT INTO consumers (id, position, updated_at) VALUES ('listener:kept', 0, 0)")
            }
            try page.damage(path, readThrough: readThrough)
            // A collector of its own: its log is read after every request.
            let collectorDirectory = TemporaryDirectory()
            let collector = try await TestCollector(collectorDirectory)
            // What the engine reported, for the message of a salvage that does not come.
            let diagnostics = Protected<[String]>([])
            let engine = DamagedFiles.engine(directory, collector: collector) { configuration in
                configuration.diagnosticHandler = { diagnostic in diagnostics.withLock { $0.append("\(diagnostic)") } }
            }
            let listener = CollectingListener()
            if meeter == .durableListener { engine.events.addDurableObserver(listener, id: "kept") }
            try await engine.start()

            let recording = Task { try await Self.recordDurably(engine) }
            if timing == .before { _ = try await recording.value }
            switch meeter {
            case .uploader:
                // The flush whose read meets the page fails; the next one
                // goes on with the salvaged file.
                do { try await engine.flush() } catch {}
            case .reader:
                // A block on the database queue between the commits.
                do { _ = try await engine.query { try $0.readEvents(after: 0, limit: .max, now: 0) } } catch {}
            case .durableListener: break  // its catch-up from start() reads the page
            }
            if timing == .during { _ = try await recording.value }
            let salvaged = try await waitUntil(timeout: 30, interval: 0.01) { engine.salvageReport != nil }
            try #require(salvaged, "\(label): salvaged; the engine reported \(diagnostics.withLock { $0 })")
            let acknowledged = try await recording.value
            try await flushUntilDone(engine)
            #expect(
                await collector.waitFor { requests in
                    Set(requests.flatMap(\.acceptedIDs)).isSuperset(of: acknowledged)
                }, "\(label): every acknowledged event uploaded")
            let arrived = Set(collector.requests().flatMap(\.acceptedIDs))
            let report = try #require(engine.salvageReport)
            let statistics = try await engine.uploadStatistics()
            await engine.close()

            let missing = ids.filter { !arrived.contains($0) }
            #expect(!missing.isEmpty && missing.allSatisfy(pageIDs.contains), "\(label): only the page's rows")
            #expect(report.lost.events == missing.count, "\(label): \(report.lost.events) reported lost")
            #expect(statistics.dropped == missing.count, "\(label)")
            #expect(arrived.isSuperset(of: acknowledged) && acknowledged.count == 100, "\(label)")
            lostCounts.append(report.lost.events)
        }
        print("P7: \(Self.repetitions) salvages, \(page.rows.count) rows on the page, lost counts \(lostCounts)")
    }

    /// Records 100 events durably and returns the ids of those it acknowledged.
    static func recordDurably(_ engine: EventEngine) async throws -> Set<String> {
        var acknowledged = Set<String>()
        for index in 0..<100 {
            if case .recorded(let id) = try await engine.recordDurably("durable", parameters: ["n": .int(index)]) {
                acknowledged.insert(id)
            }
        }
        return acknowledged
    }

    /// Puts the undamaged file back at the database's place, with no copy
    /// set aside and no mark.
    static func reset(_ directory: TemporaryDirectory, from base: String) throws {
        let path = directory.defaultDataStoreURL.path
        for name in try FileManager.default.contentsOfDirectory(atPath: directory.url.path)
        where name.hasPrefix("OPTEventQueue.") {
            try FileManager.default.removeItem(atPath: directory.file(name).path)
        }
        try FileManager.default.copyItem(atPath: base, toPath: path)
    }
}

/// The middle leaf of `events` of a queue file, in key order, found in an
/// undamaged copy: which rows live on it, and where its cells are.
struct DamagedPage {
    let number: Int
    /// The rows on it, as indices of the log in seq order.
    let rows: Range<Int>
    /// The offsets of its cells in the page, in rowid order.
    let cells: [Int]
    let head: Int64
    /// The page as it was before any damage.
    let undamagedBytes: [UInt8]

    init(undamaged path: String) throws {
        // The leaves of the events table in key order (dbstat's path), each
        // with its rows: the rows before this page are the leaves before it.
        let leaves = try DamagedFiles.cli(
            path, "SELECT pageno || ' ' || ncell FROM dbstat WHERE name = 'events' AND pagetype = 'leaf' ORDER BY path"
        ).split(separator: "\n").map { $0.split(separator: " ").compactMap { Int($0) } }
        try #require(leaves.count >= 3, "events spans several leaves")
        let index = leaves.count / 2
        let number = leaves[index][0]
        self.number = number
        let before = leaves[..<index].reduce(0) { $0 + $1[1] }
        rows = before..<before + leaves[index][1]
        head = try #require(Int64(try DamagedFiles.cli(path, "SELECT last_seq FROM log_head")))
        let bytes = try Self.bytes(of: number, in: path)
        let cellCount = Int(bytes[3]) << 8 | Int(bytes[4])
        try #require(cellCount == rows.count)
        cells = (0..<cellCount).map { Int(bytes[8 + 2 * $0]) << 8 | Int(bytes[9 + 2 * $0]) }
        undamagedBytes = bytes
    }

    static func bytes(of page: Int, in path: String) throws -> [UInt8] {
        let handle = try #require(FileHandle(forReadingAtPath: path))
        defer { try? handle.close() }  // try?: a read-only handle; nothing to lose
        try handle.seek(toOffset: UInt64((page - 1) * Connection.newFilePageSize))
        return [UInt8](try #require(try handle.read(upToCount: Connection.newFilePageSize)))
    }

    /// Overwrites 8,000 bytes 100 bytes into the page with garbage; with
    /// `readThrough`, the first cell in that garbage is a well-formed one
    /// whose rowid is past the head (garbage SQLite reads as a row).
    func damage(_ path: String, readThrough: Bool) throws {
        var garbage = [UInt8](DamagedFiles.garbage(8_000))
        if readThrough {
            let first = try #require(cells.first { (100..<8_000).contains($0) }, "a cell in the garbage")
            // Payload of 2 bytes, the rowid, and a record of one NULL column.
            let cell = [UInt8(2)] + Self.varint(UInt64(head) + 1_000_000) + [2, 0]
            garbage.replaceSubrange((first - 100)..<(first - 100 + cell.count), with: cell)
        }
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        try handle.seek(toOffset: UInt64((number - 1) * Connection.newFilePageSize + 100))
        try handle.write(contentsOf: Data(garbage))
        try handle.close()
    }

    /// Damages the page as ``damage(_:readThrough:)`` does, then points the
    /// first damaged cell (in rowid order) at a well-formed cell written into
    /// the garbage: its own rowid, and an `id` that claims 1.5 GB. That is
    /// past SQLite's length limit, so a read stepping onto the page fails
    /// with SQLITE_TOOBIG rather than SQLITE_CORRUPT.
    func damageWithAnOverlongValue(_ path: String) throws {
        try damage(path, readThrough: false)
        let undamaged = undamagedBytes
        let index = try #require(cells.firstIndex { $0 < 8_100 }, "a cell in the garbage")
        var offset = cells[index]
        _ = Self.readVarint(undamaged, &offset)  // the payload's size
        let rowid = Self.readVarint(undamaged, &offset)
        // Payload past the length limit; the part stored on the page is
        // what SQLite's b-tree rule gives a 16 KiB page.
        let payload: UInt64 = 1_500_000_000
        let usable = UInt64(Connection.newFilePageSize)
        let minLocal = (usable - 12) * 32 / 255 - 23
        var local = minLocal + (payload - minLocal) % (usable - 4)
        if local > usable - 35 { local = minLocal }
        let idType = Self.varint((payload - 7) * 2 + 13)  // a text of payload − header bytes
        let header = [UInt8(2 + idType.count), 0] + idType  // seq is the rowid: NULL in the record
        var cell = Self.varint(payload) + Self.varint(rowid) + header
        cell += [UInt8](repeating: 0, count: Int(local) - header.count) + [0, 0, 0, 2]  // the first overflow page
        let at = 200
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }  // try?: the writes below have thrown or succeeded
        let start = UInt64((number - 1) * Connection.newFilePageSize)
        try handle.seek(toOffset: start + UInt64(at))
        try handle.write(contentsOf: Data(cell))
        try handle.seek(toOffset: start + UInt64(8 + 2 * index))
        try handle.write(contentsOf: Data([UInt8(at >> 8), UInt8(at & 0xff)]))
    }

    /// SQLite's variable-length integer at `offset` (up to 8 bytes of 7 bits
    /// here), moving `offset` past it.
    static func readVarint(_ bytes: [UInt8], _ offset: inout Int) -> UInt64 {
        var value: UInt64 = 0
        repeat {
            value = value << 7 | UInt64(bytes[offset] & 0x7f)
            offset += 1
        } while bytes[offset - 1] & 0x80 != 0
        return value
    }

    /// SQLite's variable-length integer (up to 8 bytes of 7 bits here).
    static func varint(_ value: UInt64) -> [UInt8] {
        var groups: [UInt8] = []
        var rest = value
        repeat {
            groups.insert(UInt8(rest & 0x7f), at: 0)
            rest >>= 7
        } while rest > 0
        return groups.enumerated().map { $0.offset < groups.count - 1 ? $0.element | 0x80 : $0.element }
    }
}
