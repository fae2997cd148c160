import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Two processes on a file with a damaged page: one salvages it while the
/// other has the damaged file open. The other must follow the fresh file,
/// never set it aside in turn.
@Suite(.needsChildProcesses)
struct SalvageElsewhereTests {
    /// Uploads what the file at `url` holds to `collector`.
    static func drain(_ url: URL, _ collector: TestCollector) async throws {
        let drainer = EventEngine(
            configuration: EngineConfiguration(
                database: .file(url), maximumRetainedEvents: nil, collectorURL: collector.url, batchSize: 100,
                dispatcher: DefaultEventDispatcher(requestTimeout: 5), retryPolicy: fastRetry))
        try await drainer.start()
        try await waitUntil(timeout: 60, interval: 0.1) {
            do { try await drainer.flush() } catch {}
            return try await drainer.uploadStatistics().pending == 0
        }
        await drainer.close()
    }

    /// A queue file of 600 events with a damaged page in the middle of its
    /// log.
    static func damagedQueueFile(_ directory: TemporaryDirectory, _ collector: TestCollector) async throws {
        try await collector.control(["format": "spool"])
        _ = try await DamagedFiles.queueFile(directory, collector: collector, events: 600)
        _ = try SalvageReadingTests.overwriteLeaf(ofEvents: directory.defaultDataStoreURL.path, offset: 8)
    }

    /// A worker process recording durably into the file and uploading every
    /// 0.2 s, which meets the page and salvages the file; returns once it has.
    static func salvagingWorker(_ directory: TemporaryDirectory, _ collector: TestCollector) async throws
        -> ProcessBoundaryTests.Child
    {
        let worker = try ProcessBoundaryTests.Child(
            [
                directory.defaultDataStoreURL.path, "b", "--worker", collector.url.absoluteString,
                "\(Date().timeIntervalSince1970)", "8",
            ], in: directory, name: "b")
        #expect(
            try await waitUntil(timeout: 30, interval: 0.05) {
                (try? DamagedFiles.copies(in: directory).count) ?? 0 >= 1
            },
            "the worker salvaged the file")
        return worker
    }

    /// Diagnostics' kinds, as they are reported.
    static func collecting(_ configuration: inout EngineConfiguration) -> Protected<[SpoolDiagnostic.Kind]> {
        let kinds = Protected<[SpoolDiagnostic.Kind]>([])
        configuration.diagnosticHandler = { diagnostic in kinds.withLock { $0.append(diagnostic.kind) } }
        return kinds
    }

    @Test(
        "P4, P7: a process still on the damaged file commits after another process salvaged it: it follows the fresh file and sets nothing aside, and the other's acknowledged events all go out, once"
    )
    func secondSalvageFollowsTheFreshFile() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await Self.damagedQueueFile(directory, collector)
        // A: this process, no uploader, a bound of 300: its first commit
        // drops the oldest, short of the page; later ones cross it.
        var configuration = EngineConfiguration(database: .file(directory.defaultDataStoreURL))
        configuration.maximumRetainedEvents = 300
        let diagnostics = Self.collecting(&configuration)
        let a = EventEngine(configuration: configuration)
        try await a.start()
        try await a.settle()
        let b = try await Self.salvagingWorker(directory, collector)
        let copiesAfterB = try DamagedFiles.copies(in: directory)
        for index in 0..<300 where !diagnostics.withLock({ $0.contains(.storeSalvagedElsewhere) }) {
            do {
                _ = try await a.recordDurably("a_event", parameters: ["i": .int(index)])
            } catch SpoolError.stillBuffered {}  // accepted; committed once the fresh file is followed
        }
        #expect(try await waitUntil(timeout: 10) { diagnostics.withLock { $0.contains(.storeSalvagedElsewhere) } })
        #expect(a.salvageReport == nil && !diagnostics.withLock { $0.contains(.storeSalvaged) }, "A salvaged nothing")
        #expect(
            try DamagedFiles.copies(in: directory) == copiesAfterB, "only B's copy of the damaged file is set aside")
        let bLines = await b.finish(timeout: 60)
        #expect(bLines.last == "DONE", "\(bLines.filter { !$0.hasPrefix("ACK") }.suffix(5))")
        await a.close()
        let acknowledged = bLines.filter { $0.hasPrefix("ACK ") }.map { String($0.dropFirst(4)) }
        try await Self.drain(directory.defaultDataStoreURL, collector)
        var timesAccepted: [String: Int] = [:]
        for id in collector.requests().filter(\.taken).flatMap(\.acceptedIDs) { timesAccepted[id, default: 0] += 1 }
        #expect(acknowledged.count > 0)
        #expect(acknowledged.filter { timesAccepted[$0] == nil }.count == 0, "B's acknowledged events all went out")
    }

    @Test(
        "P7: after another process salvaged the file, the next commit follows the fresh file: the events after it go out from there"
    )
    func aCommitNoticesTheFreshFile() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await Self.damagedQueueFile(directory, collector)
        var configuration = EngineConfiguration(database: .file(directory.defaultDataStoreURL))
        let diagnostics = Self.collecting(&configuration)
        let a = EventEngine(configuration: configuration)
        try await a.start()
        let b = try await Self.salvagingWorker(directory, collector)
        // The first commit after the salvage goes to the old file and notices.
        _ = try await a.recordDurably("a_first")
        #expect(try await waitUntil(timeout: 10) { diagnostics.withLock { $0.contains(.storeSalvagedElsewhere) } })
        var after: [String] = []
        for index in 0..<20 {
            if case .recorded(let id) = try await a.recordDurably("a_after", parameters: ["i": .int(index)]) {
                after.append(id)
            }
        }
        _ = await b.finish(timeout: 60)
        await a.close()
        try await Self.drain(directory.defaultDataStoreURL, collector)
        #expect(after.count == 20)
        #expect(Set(collector.acceptedIDs()).isSuperset(of: after), "A's events after it noticed went out")
        #expect(diagnostics.withLock { $0.filter { $0 == .storeSalvagedElsewhere }.count } == 1)
        #expect(!diagnostics.withLock { $0.contains(.storeSalvaged) }, "A salvaged nothing")
    }

    @Test(
        "P4: after another process salvaged the file, a durable listener's catch-up meets the page in the old file: the fresh file is followed, not salvaged"
    )
    func aReadMeetsTheDamageAfterASalvageElsewhere() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await Self.damagedQueueFile(directory, collector)
        // A durable listener that has had none of the events.
        try DamagedFiles.cli(
            directory.defaultDataStoreURL.path,
            "INSERT INTO consumers (id, position, updated_at) VALUES ('listener:late', 0, 0)")
        var configuration = EngineConfiguration(database: .file(directory.defaultDataStoreURL))
        let diagnostics = Self.collecting(&configuration)
        let a = EventEngine(configuration: configuration)
        try await a.start()
        let b = try await Self.salvagingWorker(directory, collector)
        let copiesAfterB = try DamagedFiles.copies(in: directory)
        // No commit of A's since: its catch-up reads the old file across the page.
        a.events.addDurableObserver(CollectingListener(), id: "late")
        #expect(try await waitUntil(timeout: 10) { diagnostics.withLock { $0.contains(.storeSalvagedElsewhere) } })
        #expect(a.salvageReport == nil && !diagnostics.withLock { $0.contains(.storeSalvaged) }, "A salvaged nothing")
        #expect(try DamagedFiles.copies(in: directory) == copiesAfterB, "the fresh file was not set aside")
        _ = await b.finish(timeout: 60)
        await a.close()
    }
}
