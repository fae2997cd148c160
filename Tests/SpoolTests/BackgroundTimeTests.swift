import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// The orders of the platform's reports that the day's tests do not take:
/// background time that ends while a pass already running, a window the app
/// opened, or the device lock meets an upload, and a lock while `start()`
/// opens the file.
@Suite(.needsChildProcesses)
struct BackgroundTimeTests {
    /// The uploader's waiters: flushes, and pauses or stops behind a pass.
    static func waiters(_ engine: EventEngine) async -> (flushes: Int, passes: Int) {
        guard let uploader = engine.uploaderBox.withLock({ $0 }) else { return (0, 0) }
        return await uploader.waiterCounts()
    }

    @Test(
        "O8: the device locks (complete protection) while start() opens the file, the app in the foreground: the database is suspended once started",
        arguments: [StartStep.opened, .uploaderStarted])
    func lockWhileStarting(step: StartStep) async throws {
        let directory = TemporaryDirectory()
        let os = FakeOS()
        var configuration = EngineConfiguration(database: .file(directory.databaseURL)).on(os)
        configuration.fileProtection = .complete
        configuration.startStep = { reached in
            if reached == step { os.send(.protectedDataWillBecomeUnavailable) }
        }
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        #expect(try await PlatformDayTests.waitUntilSuspended(engine), "locked at \(step), awake after start()")
        os.send(.protectedDataDidBecomeAvailable)
        #expect(try await PlatformDayTests.waitUntilSuspended(engine, false))
        await engine.close()
    }

    @Test(
        "O4: background time ends while the pass that was running when the app left is still in flight: nothing is sent again, and the database suspends",
        arguments: [1, 2])
    func expiryDuringAPassAlreadyRunning(concurrentRequests: Int) async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let os = FakeOS()
        var configuration = uploadingConfiguration(directory, collector: collector, batchSize: 10, requestTimeout: 30)
            .on(os)
        configuration.maximumConcurrentRequests = concurrentRequests
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        try await collector.control(["mode": "hold", "hang_seconds": 40])
        let ids = try recordEvents(engine, 30)  // the batch size starts a pass: held
        #expect(try await collector.waitForHeld(concurrentRequests))
        os.send(.didEnterBackground)
        // The background activity waits for the pass after the running one.
        #expect(try await waitUntil(timeout: 10, asking: { await Self.waiters(engine).flushes >= 1 }))
        os.expireRunning()
        #expect(try await PlatformDayTests.waitUntilSuspended(engine), "\(PlatformDayTests.lifecycle(engine, os))")
        #expect(try await waitUntil(timeout: 10) { os.activitiesRunning == 0 })
        // Nothing went out after the time ended: the collector holds only
        // the requests sent before.
        #expect(try await collector.control([:]) == concurrentRequests)
        try await Self.comeBack(collector, os)
        try await flushUntilDone(engine)
        let accepted = collector.acceptedIDs()
        #expect(Set(accepted).isSuperset(of: ids) && accepted.count == Set(accepted).count, "each event taken once")
        await engine.close()
    }

    /// The requests held are answered 503 (none was taken), the collector
    /// takes what comes next, and the app becomes active.
    static func comeBack(_ collector: TestCollector, _ os: FakeOS) async throws {
        try await collector.control(["release": 503])
        try await collector.control(["mode": "ok"])
        os.send(.didBecomeActive)
    }

    /// Records 5 events while the app is in the background with its
    /// database suspended, and holds every request from then on.
    static func suspendedInTheBackground(
        _ directory: TemporaryDirectory, _ collector: TestCollector, _ os: FakeOS
    ) async throws -> (EventEngine, ids: [String]) {
        let engine = EventEngine(
            configuration: uploadingConfiguration(directory, collector: collector, batchSize: 100, requestTimeout: 30)
                .on(os))
        try await engine.start()
        os.send(.didEnterBackground)
        #expect(try await PlatformDayTests.waitUntilSuspended(engine))
        #expect(try await waitUntil(timeout: 10) { os.activitiesRunning == 0 })
        let ids = try recordEvents(engine, 5)
        try await collector.control(["mode": "hold", "hang_seconds": 40])
        return (engine, ids)
    }

    @Test(
        "O4: flush() in the background window it opens; the time ends with its request in flight: it throws suspended at once and the database suspends"
    )
    func flushWindowExpiry() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let os = FakeOS()
        let (engine, ids) = try await Self.suspendedInTheBackground(directory, collector, os)
        let flushing = Task { try await engine.flush() }
        #expect(try await collector.waitForHeld(1))
        os.expireRunning()
        await #expect(throws: SpoolError.suspended) { try await flushing.value }
        #expect(try await PlatformDayTests.waitUntilSuspended(engine))
        #expect(try await waitUntil(timeout: 10) { os.activitiesRunning == 0 })
        #expect(try await collector.control([:]) == 1, "nothing was sent after the time ended")
        try await Self.comeBack(collector, os)
        try await flushUntilDone(engine)
        #expect(Set(collector.acceptedIDs()).isSuperset(of: ids))
        await engine.close()
    }

    @Test(
        "O4: pauseUploads() in a background window, behind a request in flight; the time ends: it returns, and the pause holds after the app comes back"
    )
    func pauseWindowExpiry() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let os = FakeOS()
        let (engine, ids) = try await Self.suspendedInTheBackground(directory, collector, os)
        let flushing = Task { try await engine.flush() }
        #expect(try await collector.waitForHeld(1))
        let pausing = Task { try await engine.pauseUploads() }
        #expect(try await waitUntil(timeout: 10, asking: { await Self.waiters(engine).passes >= 1 }))
        os.expireRunning()
        // Both return once the request is abandoned; the flush's time ended.
        await #expect(throws: SpoolError.suspended) { try await flushing.value }
        let paused = await pausing.result
        #expect(try await collector.control([:]) == 1, "nothing was sent after the time ended")
        try await Self.comeBack(collector, os)
        #expect(try await PlatformDayTests.waitUntilSuspended(engine, false))
        if case .success = paused {
            #expect(try await engine.uploadStatistics().paused)
            try await engine.resumeUploads()
        }
        try await flushUntilDone(engine)
        #expect(Set(collector.acceptedIDs()).isSuperset(of: ids))
        await engine.close()
    }

    @Test(
        "O4: two background windows at once: the one that ends first leaves the database awake for the other's upload"
    )
    func overlappingWindows() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let os = FakeOS()
        let (engine, ids) = try await Self.suspendedInTheBackground(directory, collector, os)
        let flushed = Protected<Result<Void, any Error>?>(nil)
        Task {
            let result = await Task { try await engine.flush() }.result
            flushed.withLock { $0 = result }
        }
        #expect(try await collector.waitForHeld(1))
        // A second window opens and ends while the first uploads.
        #expect(try await engine.requeueDeadLetters() == 0)
        #expect(!(try await waitUntil(timeout: 0.5) { engine.isDatabaseSuspended }), "suspended under the upload")
        try await collector.control(["mode": "ok"])
        try await collector.control(["release": 200])
        #expect(try await waitUntil(timeout: 10) { flushed.withLock { $0 != nil } }, "the upload's answer was saved")
        #expect(throws: Never.self) { try flushed.withLock { $0 }?.get() }
        #expect(try await PlatformDayTests.waitUntilSuspended(engine), "suspended once both windows ended")
        #expect(Set(collector.acceptedIDs()).isSuperset(of: ids))
        os.send(.didBecomeActive)
        await engine.close()
    }

    @Test(
        "O1, O8: the device locks (default protection) while the background upload is in flight: the upload goes on and finishes before the database suspends"
    )
    func lockDuringBackgroundUpload() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let os = FakeOS()
        let engine = EventEngine(
            configuration: uploadingConfiguration(directory, collector: collector, batchSize: 10, requestTimeout: 30)
                .on(os))
        try await engine.start()
        try await collector.control(["mode": "hold", "hang_seconds": 40])
        let ids = try recordEvents(engine, 25)  // the batch size starts a pass: held
        #expect(try await collector.waitForHeld(1))
        // The background activity waits for the pass after the running one.
        os.send(.didEnterBackground)
        #expect(try await waitUntil(timeout: 10, asking: { await Self.waiters(engine).flushes >= 1 }))
        os.send(.protectedDataWillBecomeUnavailable)
        #expect(!(try await waitUntil(timeout: 0.5) { engine.isDatabaseSuspended }), "suspended under the upload")
        // Requests from now on are answered, then the one held is.
        try await collector.control(["mode": "ok"])
        try await collector.control(["release": 200])
        #expect(try await PlatformDayTests.waitUntilSuspended(engine))
        #expect(try await waitUntil(timeout: 20) { os.activitiesRunning == 0 })
        #expect(Set(collector.acceptedIDs()).isSuperset(of: ids), "everything went out in the background")
        os.send(.protectedDataDidBecomeAvailable)
        os.send(.didBecomeActive)
        await engine.close()
    }
}

extension Uploader {
    /// How many flushes wait for a pass, and how many pauses or stops wait
    /// for the one running to end.
    func waiterCounts() -> (flushes: Int, passes: Int) {
        (schedule.flushWaiterCount, schedule.passWaiterCount)
    }
}
