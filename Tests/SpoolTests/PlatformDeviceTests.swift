import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// The device around the app (O6–O8, O12, O13): switches between background and
/// foreground faster than the work they start, an app extension's short
/// background time, a locked device, a memory warning.
@Suite(.needsChildProcesses)
struct PlatformDeviceTests {
    @Test(
        "O6: 1,000 switches to the background and back, each within a millisecond, while recording and uploading: nothing lost, the database awake at the end, uploads going on"
    )
    func thousandSwitches() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let os = FakeOS()
        let engine = PlatformDayTests.uploading(directory, collector, on: os, batchSize: 50, timerInterval: 0.05)
        try await engine.start()
        let recording = Task {
            var ids: [String] = []
            for index in 0..<3_000 {
                if case .recorded(let id) = try engine.record("switching", parameters: ["i": .int(index)]) {
                    ids.append(id)
                }
                if index % 10 == 0 { await Task.yield() }
            }
            return ids
        }
        for _ in 0..<1_000 {
            os.send(.didEnterBackground)
            os.send(.didBecomeActive)
        }
        let ids = try await recording.value
        let database = try #require(engine.databaseQueue)
        #expect(
            try await waitUntil(timeout: 20) { !database.isSuspended && !database.areCheckpointsSuspended },
            "awake at the end")
        let back = Date()
        // Uploads go on by themselves (the 50 ms timer), without a flush.
        #expect(try await waitUntil(timeout: 30, interval: 0.01) { Set(collector.acceptedIDs()).isSuperset(of: ids) })
        print(
            "after 1,000 switches: every event at the collector \(Int(Date().timeIntervalSince(back) * 1_000)) ms later"
        )
        #expect(ids.count == 3_000)
        // The collector's answer lands before the position is saved.
        #expect(try await waitUntil(timeout: 20, asking: { try await engine.uploadStatistics().pending == 0 }))
        await engine.close()
        #expect(try await waitUntil(timeout: 10) { os.activitiesRunning == 0 }, "every activity ended")
    }

    @Test(
        "O7: an app extension: its host's background time ends within moments; the file is let go, and what it recorded goes out when the host returns"
    )
    func appExtensionHost() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let os = FakeOS()
        let engine = PlatformDayTests.uploading(directory, collector, on: os)
        try await engine.start()
        let before = try recordEvents(engine, 10)
        // The host goes to the background; its time ends as soon as given.
        os.send(.didEnterBackground)
        #expect(try await waitUntil(timeout: 20) { os.activitiesRequested >= 1 })
        os.expireRunning()
        #expect(try await PlatformDayTests.waitUntilSuspended(engine))
        #expect(try SuspensionTests.fileIsFree(directory.databaseURL.path))
        os.grant = .refused
        let after = try recordEvents(engine, 10)
        #expect(engine.isDatabaseSuspended)
        #expect(try SuspensionTests.fileIsFree(directory.databaseURL.path), "recording asks for no lock")
        os.grant = .granted
        os.send(.didBecomeActive)
        try await engine.flush()
        #expect(Set(collector.acceptedIDs()).isSuperset(of: before + after))
        await engine.close()
    }

    /// The WAL's size and modification time, and the events another
    /// connection sees: what shows whether the engine touched the file.
    static func fileState(_ directory: TemporaryDirectory) throws -> (wal: [FileAttributeKey: Any], events: Int) {
        let wal = try FileManager.default.attributesOfItem(atPath: directory.databaseURL.path + "-wal")
        let reader = try Connection(
            path: directory.databaseURL.path, options: ConnectionOptions(busyTimeoutMilliseconds: 0))
        defer { reader.close() }
        return (wal, try reader.scalarInt("SELECT count(*) FROM events WHERE name = 'locked'"))
    }

    @Test(
        "O8: the device locks with complete protection while events are recorded: no file I/O, nothing lost, and the buffer commits on unlock; other classes keep committing"
    )
    func protectedDataUnavailable() async throws {
        let directory = TemporaryDirectory()
        let os = FakeOS()
        let engine = try await startedEngine(directory) { configuration in
            configuration = configuration.on(os)
            configuration.fileProtection = .complete
        }
        try await engine.recordDurably("unlocked")
        os.send(.protectedDataWillBecomeUnavailable)
        #expect(try await PlatformDayTests.waitUntilSuspended(engine))
        let before = try Self.fileState(directory)
        let durable = Task { try await engine.recordDurably("locked") }
        for index in 0..<99 { try engine.record("locked", parameters: ["i": .int(index)]) }
        #expect(try await waitUntil(timeout: 5) { engine.eventLog?.bufferedCount == 100 }, "held in memory")
        let locked = try Self.fileState(directory)
        #expect(locked.events == 0, "nothing reached the file")
        for key in [FileAttributeKey.size, .modificationDate] {
            #expect("\(locked.wal[key] ?? "-")" == "\(before.wal[key] ?? "-")", "the WAL's \(key.rawValue) unchanged")
        }
        #expect(os.activitiesRequested == 0, "no window opened while locked")
        os.send(.protectedDataDidBecomeAvailable)
        _ = try await durable.value
        #expect(try await waitUntil(timeout: 10) { try Self.fileState(directory).events == 100 })
        #expect(!engine.isDatabaseSuspended)
        await engine.close()

        // The default class stays usable while locked: nothing stops.
        let other = TemporaryDirectory()
        let os2 = FakeOS()
        let engine2 = try await startedEngine(other) { $0 = $0.on(os2) }
        os2.send(.protectedDataWillBecomeUnavailable)
        try await engine2.recordDurably("locked")
        _ = try await engine2.query { _ in 0 }
        #expect(!engine2.isDatabaseSuspended)
        #expect(os2.activitiesRequested == 0)
        await engine2.close()
    }

    @Test("O12: a memory warning commits what is buffered and gives back SQLite's page cache")
    func memoryWarning() async throws {
        let directory = TemporaryDirectory()
        let os = FakeOS()
        let engine = try await startedEngine(directory) { $0 = $0.on(os) }
        for index in 0..<5_000 { try engine.record("warm", parameters: ["i": .int(index)]) }
        try await engine.settle()
        let warm = try await engine.query { connection -> Int in
            _ = try connection.scalarInt("SELECT sum(length(parameters)) FROM events")
            return connection.cacheBytesUsed
        }
        try engine.record("just_before")
        os.send(.memoryWarning)
        #expect(try await waitUntil(timeout: 10) { engine.eventLog?.bufferedCount == 0 })
        #expect(
            try await waitUntil(timeout: 10, asking: { try await engine.query { $0.cacheBytesUsed } < warm / 2 }),
            "the page cache (\(warm) bytes) given back")
        await engine.close()
    }

    @Test(
        "O13: a durable listener's catch-up asked for in the background, when the system grants no time: the file untouched, then everything delivered once, in order, back in the foreground"
    )
    func catchUpWithoutBackgroundTime() async throws {
        let directory = TemporaryDirectory()
        let os = FakeOS()
        // Registered at the first launch, then away while 3,000 events are recorded.
        let engine = try await startedEngine(directory) { configuration in
            configuration = configuration.on(os)
        } before: { engine in
            engine.events.addDurableObserver(CollectingListener(), id: "away")
        }
        engine.events.removeDurableObserver(id: "away")
        for index in 0..<3_000 { try engine.record("missed", parameters: ["i": .int(index)]) }
        try await engine.settle()
        os.send(.didEnterBackground)
        #expect(try await PlatformDayTests.waitUntilSuspended(engine), "\(PlatformDayTests.lifecycle(engine, os))")
        #expect(try await waitUntil(timeout: 10) { os.activitiesRunning == 0 })
        os.grant = .refused
        let listener = CollectingListener()
        engine.events.addDurableObserver(listener, id: "away")
        #expect(try await waitUntil(timeout: 10) { os.activitiesRequested >= 2 }, "a window was asked for")
        #expect(listener.customNames.isEmpty, "nothing read without time")
        #expect(engine.isDatabaseSuspended)
        #expect(try SuspensionTests.fileIsFree(directory.databaseURL.path))
        os.grant = .granted
        os.send(.didBecomeActive)
        #expect(try await waitUntil(timeout: 30) { listener.customNames.count == 3_000 })
        let order = listener.received.withLock {
            $0.filter { $0.name == "missed" }.compactMap { $0.parameters["i"]?.intValue }
        }
        #expect(order == Array(0..<3_000), "each once, in order")
        await engine.close()
    }
}
