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
