import Foundation
import Testing

@_spi(TransportAuthoring) @testable import Spool
@testable import SpoolStorage

/// Uploads that outlive suspension (O14–O17): batches handed to a scripted
/// background session (``FakeBackgroundSession``) that sends them to the
/// real test collector when the test says so, before, during and after a
/// simulated relaunch, or fails, or never answers.
@Suite(.needsChildProcesses)
struct BackgroundTransferTests {
    static func engine(
        _ directory: TemporaryDirectory, _ collector: TestCollector, on os: FakeOS, clock: ManualClock? = nil,
        configure: (inout EngineConfiguration) -> Void = { _ in }
    ) -> EventEngine {
        var configuration = uploadingConfiguration(
            directory, collector: collector, batchSize: 10, timerInterval: 3_600, clock: clock
        ).on(os)
        configuration.backgroundTransfers = BackgroundTransfers()
        configure(&configuration)
        return EventEngine(configuration: configuration)
    }

    /// Records `count` events with no network path (nothing goes out in
    /// the foreground), then goes to the background: the first batch is
    /// handed to the system.
    static func handOffFirstBatch(
        _ engine: EventEngine, _ os: FakeOS, events count: Int
    ) async throws -> (ids: [String], transfer: FakeBackgroundSession.Transfer) {
        os.networkPath.set(available: false)
        let ids = try recordEvents(engine, count)
        try await engine.settle()
        os.send(.didEnterBackground)
        #expect(
            try await waitUntil(timeout: 20) { os.backgroundSession.pending.count == 1 && engine.isDatabaseSuspended },
            "\(PlatformDayTests.lifecycle(engine, os))")
        return (ids, try #require(os.backgroundSession.pending.first))
    }

    /// The queue file `uploadingConfiguration` names.
    static func queueFile(_ directory: TemporaryDirectory) -> String {
        directory.url.appendingPathComponent(DefaultEventDispatcher.defaultDataStoreName + ".sqlite").path
    }

    /// The `background_transfers` rows, as the sqlite3 CLI shows them.
    static func rows(_ directory: TemporaryDirectory) throws -> [String] {
        let text = try DamagedFiles.cli(
            Self.queueFile(directory),
            "SELECT batch_id, event_count, state, sends FROM background_transfers ORDER BY first_seq")
        return text.isEmpty ? [] : text.split(separator: "\n").map(String.init)
    }

    /// The rows, or why they could not be read, for a failure's message.
    static func rowsText(_ directory: TemporaryDirectory) -> String {
        do { return "\(try rows(directory))" } catch { return "rows unreadable: \(error)" }
    }

    static func transfersDirectory(_ directory: TemporaryDirectory) -> String {
        Self.queueFile(directory) + "-transfers"
    }

    static func bodies(_ directory: TemporaryDirectory) -> [String] {
        // No directory: nothing was ever handed off.
        guard FileManager.default.fileExists(atPath: transfersDirectory(directory)) else { return [] }
        do {
            return try FileManager.default.contentsOfDirectory(atPath: transfersDirectory(directory))
        } catch {
            return ["unreadable: \(error)"]
        }
    }

    @Test(
        "O14: in the background the next batch goes to the system's session, recorded and with its batch id as Idempotency-Key; each report settles it once and hands over the next"
    )
    func handOffInTheBackground() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let os = FakeOS()
        let engine = Self.engine(directory, collector, on: os)
        try await engine.start()
        let (ids, first) = try await Self.handOffFirstBatch(engine, os, events: 24)
        #expect(collector.requests().isEmpty, "the app sent nothing itself")
        #expect(first.request.value(forHeader: "Idempotency-Key") == first.batchID)
        #expect(try Self.rows(directory) == ["\(first.batchID)|10|handed_off|1"])
        #expect(Self.bodies(directory) == ["\(first.batchID).body"])
        // Owner only, like the database, whatever the process's umask.
        let modes = try [
            Self.transfersDirectory(directory), Self.transfersDirectory(directory) + "/\(first.batchID).body",
        ]
        .map { path in
            (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int).map {
                String($0, radix: 8)
            }
        }
        #expect(modes == ["700", "600"])
        #expect(
            try DamagedFiles.cli(Self.queueFile(directory), "SELECT count(*) FROM events") == "25",
            "session_start and 24 events stay queued")
        // The suspension comes last in the activity, which then returns.
        #expect(
            try await waitUntil(timeout: 20) { os.activitiesRunning == 0 },
            "no background time is held while the system sends")

        // Each report settles its batch in a background window and hands
        // the next one over, until the queue is empty.
        var batchIDs: [String] = []
        while let next = os.backgroundSession.pending.first {
            let (transfer, status) = try await os.backgroundSession.completeNext()
            #expect(status == 200)
            #expect(transfer.batchID == next.batchID)
            batchIDs.append(transfer.batchID)
            let settled = try await waitUntil(timeout: 20) {
                let rows = try Self.rows(directory)
                return !rows.contains { $0.hasPrefix(transfer.batchID) }
                    && (os.backgroundSession.pending.count == 1 || rows.isEmpty)
                    && engine.isDatabaseSuspended && os.activitiesRunning == 0
            }
            #expect(settled, "\(Self.rowsText(directory)), \(PlatformDayTests.lifecycle(engine, os))")
            guard settled, batchIDs.count < 10 else { break }
        }
        #expect(batchIDs.count == 3, "25 events in batches of 10")
        #expect(Set(batchIDs).count == 3)
        #expect(try Self.rows(directory).isEmpty)
        #expect(Self.bodies(directory).isEmpty, "each body is deleted once settled")
        let requests = collector.requests()
        #expect(requests.map { $0.header("Idempotency-Key") } == batchIDs)
        #expect(Set(collector.acceptedIDs()).isSuperset(of: ids))
        #expect(collector.acceptedIDs().count == 25, "each event once")
        os.send(.didBecomeActive)
        #expect(try await engine.uploadStatistics().pending == 0)
        await engine.close()
    }

    @Test(
        "O15: a report that comes after the app was terminated, while the next launch starts or once it has, is settled once by that launch, and the system's completion handler runs after it",
        arguments: ["terminated", "starting", "started"])
    func reportAcrossRelaunch(when: String) async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let os = FakeOS()
        let first = Self.engine(directory, collector, on: os)
        try await first.start()
        let (ids, transfer) = try await Self.handOffFirstBatch(first, os, events: 9)
        await first.close()  // the app is terminated while the system sends

        // The system relaunches the app in the background for the report.
        let handlerCalls = Protected(0)
        let identifier = try #require(os.backgroundSession.identifier)
        os.backgroundTransfers.handleEvents(for: identifier) { handlerCalls.withLock { $0 += 1 } }
        let reported = Protected(false)
        let report: @Sendable () async throws -> Void = {
            guard !reported.withLock({ $0 }) else { return }
            reported.withLock { $0 = true }
            try await os.backgroundSession.completeNext()
            os.backgroundSession.deliveredAll()
        }
        if when == "terminated" { try await report() }
        let second = Self.engine(directory, collector, on: os) { configuration in
            guard when == "starting" else { return }
            configuration.startStep = { step in
                guard step == .opened else { return }
                do { try await report() } catch { Issue.record("the report during start(): \(error)") }
            }
        }
        second.applicationDidEnterBackground()
        try await second.start()
        if when == "started" { try await report() }
        #expect(reported.withLock { $0 })

        // Settled, and the new launch's session_start handed over next.
        let settled = try await waitUntil(timeout: 20) {
            !(try Self.rows(directory).contains { $0.hasPrefix(transfer.batchID) })
                && os.backgroundSession.pending.count == 1 && handlerCalls.withLock { $0 } == 1
                && second.isDatabaseSuspended
        }
        #expect(settled, "\(Self.rowsText(directory)), handler \(handlerCalls.withLock { $0 })")
        #expect(!Self.bodies(directory).contains("\(transfer.batchID).body"))
        #expect(os.backgroundSession.handed.count == 2)
        let requests = collector.requests()
        #expect(requests.count == 1, "the relaunch did not send the batch again")
        #expect(requests.first?.header("Idempotency-Key") == transfer.batchID)
        #expect(collector.acceptedIDs().count == 10)
        #expect(Set(collector.acceptedIDs()).isSuperset(of: ids))
        os.send(.didBecomeActive)
        #expect(try await second.uploadStatistics().pending == 1, "the second launch's session_start, with the system")
        #expect(handlerCalls.withLock { $0 } == 1, "the completion handler runs once")
        await second.close()
    }

    @Test(
        "O16: a transfer that fails stays recorded and its events queued; the next upload sends the same body with the same batch id"
    )
    func failedTransfer() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let os = FakeOS()
        let engine = Self.engine(directory, collector, on: os)
        try await engine.start()
        let (ids, transfer) = try await Self.handOffFirstBatch(engine, os, events: 5)
        let body = try Data(contentsOf: transfer.bodyFile)
        try os.backgroundSession.failNext()
        #expect(
            try await waitUntil(timeout: 20) {
                try Self.rows(directory) == ["\(transfer.batchID)|6|failed|1"] && engine.isDatabaseSuspended
                    && os.activitiesRunning == 0
            }, "\(Self.rowsText(directory))")
        #expect(os.backgroundSession.pending.isEmpty, "a failure hands nothing over at once: it backs off")

        os.networkPath.set(available: true)
        os.send(.didBecomeActive)
        try await flushUntilDone(engine)
        let requests = collector.requests()
        #expect(requests.count == 1)
        #expect(requests.first?.header("Idempotency-Key") == transfer.batchID)
        #expect(requests.first?.bytes == body.count, "the same body, byte for byte")
        #expect(Set(collector.acceptedIDs()).isSuperset(of: ids))
        #expect(try Self.rows(directory).isEmpty)
        #expect(Self.bodies(directory).isEmpty)
        await engine.close()
    }

    @Test(
        "O17: a transfer the system never answers is sent again after the bound, with the same batch id, by the system in the background or by the app; a late report then settles nothing"
    )
    func unansweredTransfer() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let os = FakeOS()
        let clock = ManualClock()
        let engine = Self.engine(directory, collector, on: os, clock: clock)
        try await engine.start()
        let (_, transfer) = try await Self.handOffFirstBatch(engine, os, events: 5)

        // In the background, past the bound: handed over again.
        os.send(.didBecomeActive)
        os.send(.didEnterBackground)
        #expect(try await PlatformDayTests.waitUntilSuspended(engine))
        #expect(os.backgroundSession.handed.count == 1, "within the bound the system is trusted")
        os.send(.didBecomeActive)
        clock.advance(by: BackgroundTransfers.defaultResendAfter + 1)
        os.send(.didEnterBackground)
        #expect(
            try await waitUntil(timeout: 20) { os.backgroundSession.handed.count == 2 && engine.isDatabaseSuspended },
            "\(PlatformDayTests.lifecycle(engine, os))")
        #expect(os.backgroundSession.handed.map(\.batchID) == [transfer.batchID, transfer.batchID])
        #expect(try Self.rows(directory) == ["\(transfer.batchID)|6|handed_off|2"])

        // In the foreground within the bound, an explicit flush says why
        // the events wait; past it, the app sends them itself.
        os.send(.didBecomeActive)
        #expect(try await PlatformDayTests.waitUntilSuspended(engine, false))
        os.networkPath.set(available: true)
        await expectUploadDeferred { try await engine.flush() }
        #expect(collector.requests().isEmpty)
        clock.advance(by: BackgroundTransfers.defaultResendAfter + 1)
        try await engine.flush()
        let requests = collector.requests()
        #expect(requests.count == 1)
        #expect(requests.first?.header("Idempotency-Key") == transfer.batchID)
        #expect(try Self.rows(directory).isEmpty)

        // The system's late answers, accepted or refused, settle nothing
        // again: no record, no dead letter.
        let results = try await engine.query { try $0.scalarInt("SELECT count(*) FROM upload_batches") }
        os.backgroundSession.report(transfer.batchID, status: 400, body: "malformed")
        os.backgroundSession.report(transfer.batchID, status: 200)
        let uploader = try #require(engine.uploaderBox.withLock { $0 })
        #expect(try await waitUntil(timeout: 20, asking: { await uploader.reports.isEmpty }))
        try await engine.flush()
        #expect(try await engine.query { try $0.scalarInt("SELECT count(*) FROM upload_batches") } == results)
        #expect(try await engine.query { try $0.scalarInt("SELECT count(*) FROM dead_letters") } == 0)
        #expect(collector.requests().count == 1)
        await engine.close()
    }

    @Test("P9: erasure deletes the bodies handed to the system and cancels their transfers")
    func erasureTakesTheBodies() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let os = FakeOS()
        let engine = Self.engine(directory, collector, on: os)
        try await engine.start()
        _ = try await Self.handOffFirstBatch(engine, os, events: 5)
        #expect(Self.bodies(directory).count == 1)
        os.send(.didBecomeActive)
        try await engine.eraseAllData()
        #expect(Self.bodies(directory).isEmpty)
        #expect(os.backgroundSession.cancelled == 1)
        #expect(try Self.rows(directory).isEmpty)
        await engine.close()
    }

    @Test("O14: where the platform has no background sessions (Linux), uploads go out as without background transfers")
    func noBackgroundSessions() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        var configuration = uploadingConfiguration(
            directory, collector: collector, batchSize: 100, timerInterval: 3_600)
        configuration.backgroundTransfers = BackgroundTransfers()
        let engine = EventEngine(configuration: configuration)  // the system platform: none on Linux
        try await engine.start()
        let ids = try recordEvents(engine, 5)
        try await engine.flush()
        #expect(Set(collector.acceptedIDs()).isSuperset(of: ids))
        #expect(try Self.rows(directory).isEmpty)
        await engine.close()
    }
}
