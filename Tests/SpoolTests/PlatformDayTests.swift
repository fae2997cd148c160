import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// An iPhone's day on Linux (O1–O8): the real engine, real SQLite files and
/// the real test collector, with a scripted operating system (``FakeOS``)
/// suspending the app, granting background time or refusing it, and
/// ending it.
@Suite(.needsChildProcesses)
struct PlatformDayTests {
    static func waitUntilSuspended(_ engine: EventEngine, _ suspended: Bool = true) async throws -> Bool {
        try await waitUntil(timeout: 20, interval: 0.005) { engine.isDatabaseSuspended == suspended }
    }

    /// What the engine's lifecycle state is, for a failure's message.
    static func lifecycle(_ engine: EventEngine, _ os: FakeOS) -> String {
        let (background, going, again) = engine.state.withLock {
            ($0.inBackground, $0.goingToBackground, $0.backgroundAgain)
        }
        return "suspended \(engine.isDatabaseSuspended), in background \(background), going \(going), again \(again), "
            + "activities asked \(os.activitiesRequested), running \(os.activitiesRunning)"
    }

    static func uploading(
        _ directory: TemporaryDirectory, _ collector: TestCollector, on os: FakeOS, batchSize: Int = 1_000,
        timerInterval: TimeInterval = 3_600
    ) -> EventEngine {
        EventEngine(
            configuration: uploadingConfiguration(
                directory, collector: collector, batchSize: batchSize, timerInterval: timerInterval
            ).on(os))
    }

    @Test("O1: background time granted: the queue is uploaded, then the database lets go of the file until active")
    func backgroundTimeGranted() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let os = FakeOS()
        let engine = Self.uploading(directory, collector, on: os)
        try await engine.start()
        #expect(os.observers == 1)
        let ids = try recordEvents(engine, 50)
        try await engine.settle()
        #expect(collector.acceptedIDs().isEmpty, "nothing uploads before the background")
        os.send(.didEnterBackground)
        #expect(try await Self.waitUntilSuspended(engine), "\(Self.lifecycle(engine, os))")
        #expect(Set(collector.acceptedIDs()).isSuperset(of: ids), "uploaded before the suspension")
        #expect(try SuspensionTests.fileIsFree(directory.databaseURL.path))
        #expect(try await waitUntil(timeout: 10) { os.activitiesRunning == 0 }, "the activity ended")
        os.send(.didBecomeActive)
        #expect(try await Self.waitUntilSuspended(engine, false))
        await engine.close()
        #expect(os.observers == 0, "close() stops observing")
    }

    @Test(
        "O2: no background time granted: the database suspends at once without uploading, and flush() and requeueDeadLetters() throw suspended instead of waiting for ever"
    )
    func backgroundTimeRefused() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let os = FakeOS(grant: .refused)
        let engine = Self.uploading(directory, collector, on: os)
        try await engine.start()
        let ids = try recordEvents(engine, 20)
        try await engine.settle()
        os.send(.didEnterBackground)
        #expect(try await Self.waitUntilSuspended(engine))
        #expect(collector.requests().isEmpty, "no request without background time")
        #expect(try SuspensionTests.fileIsFree(directory.databaseURL.path))

        for call in ["flush", "requeueDeadLetters"] {
            let finished = Protected<Result<Void, any Error>?>(nil)
            Task {
                do {
                    if call == "flush" { try await engine.flush() } else { _ = try await engine.requeueDeadLetters() }
                    finished.withLock { $0 = .success(()) }
                } catch {
                    finished.withLock { $0 = .failure(error) }
                }
            }
            #expect(try await waitUntil(timeout: 10) { finished.withLock { $0 != nil } }, "\(call) returned")
            guard case .failure(let error) = finished.withLock({ $0 }) else {
                Issue.record("\(call) did not throw")
                continue
            }
            #expect(error as? SpoolError == .suspended, "\(call): \(error)")
        }
        #expect(engine.isDatabaseSuspended)

        os.grant = .granted
        os.send(.didBecomeActive)
        try await engine.flush()
        #expect(Set(collector.acceptedIDs()).isSuperset(of: ids))
        await engine.close()
    }

    @Test(
        "O3: the app comes back while the database is suspending: it ends awake, its checkpoints running, whichever finishes first"
    )
    func foregroundDuringSuspension() async throws {
        let directory = TemporaryDirectory()
        let os = FakeOS()
        let engine = try await startedEngine(directory) { $0 = $0.on(os) }
        os.send(.didEnterBackground)
        #expect(try await Self.waitUntilSuspended(engine), "\(Self.lifecycle(engine, os))")
        // Work that arrives while suspended opens a window; it holds the
        // database queue until the gate opens, so the window's suspension
        // waits behind it while the app comes back.
        let gate = Gate()
        let held = Task { try await engine.query { _ in gate.pass() } }
        #expect(try await waitUntil(timeout: 20) { gate.reached })
        os.send(.didBecomeActive)
        gate.open()
        try await held.value
        let database = try #require(engine.databaseQueue)
        #expect(
            try await waitUntil(timeout: 20) { !database.isSuspended && !database.areCheckpointsSuspended },
            "awake, checkpoints running")
        try engine.record("after")
        try await engine.settle()
        #expect(!database.isSuspended && !database.areCheckpointsSuspended)
        await engine.close()
    }

    @Test(
        "O4, W6: background time ends during an upload: the requests in flight are abandoned, the database suspends, and their events go out once back in the foreground",
        arguments: [1, 2])
    func expiryDuringUpload(concurrentRequests: Int) async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let os = FakeOS()
        var configuration = uploadingConfiguration(directory, collector: collector, batchSize: 10).on(os)
        configuration.maximumConcurrentRequests = concurrentRequests
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        let ids = try recordEvents(engine, 30)
        try await engine.settle()
        try await collector.control(["mode": "hold", "hang_seconds": 30])
        os.send(.didEnterBackground)
        #expect(try await collector.waitForHeld(concurrentRequests))
        os.expireRunning()
        #expect(try await Self.waitUntilSuspended(engine))
        try await collector.control(["mode": "ok"])
        os.send(.didBecomeActive)
        try await engine.flush()
        // The flush waited for none of the abandoned requests: the collector
        // holds them still (and those of a retry before the suspension).
        #expect(try await collector.control([:]) >= concurrentRequests)
        // They are answered with an error: they were not taken.
        try await collector.control(["release": 503])
        let accepted = collector.acceptedIDs()
        #expect(Set(accepted).isSuperset(of: ids) && accepted.count == Set(accepted).count, "each event taken once")
        #expect(try await engine.uploadStatistics().pending == 0)
        await engine.close()
    }

    @Test(
        "O5: background time ends as a window for a commit opens: the events stay buffered, the file untouched, and commit on return"
    )
    func expiryDuringACommit() async throws {
        let directory = TemporaryDirectory()
        let os = FakeOS()
        let engine = try await startedEngine(directory) { $0 = $0.on(os) }
        os.send(.didEnterBackground)
        #expect(try await Self.waitUntilSuspended(engine), "\(Self.lifecycle(engine, os))")
        #expect(try await waitUntil(timeout: 10) { os.activitiesRunning == 0 })
        // From now on the system ends every grant as soon as it is made.
        os.grant = .refused
        let durable = Task { try await engine.recordDurably("in_background") }
        for index in 0..<200 { try engine.record("in_background", parameters: ["i": .int(index)]) }
        #expect(try await waitUntil(timeout: 10) { os.activitiesRequested >= 2 }, "a window was asked for")
        #expect(engine.isDatabaseSuspended)
        #expect(try SuspensionTests.fileIsFree(directory.databaseURL.path))
        os.grant = .granted
        os.send(.didBecomeActive)
        _ = try await durable.value
        try await engine.settle()
        #expect(try await engine.storedNames().filter { $0 == "in_background" }.count == 201)
        await engine.close()
    }
}
