import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// The database lets go of the file in the background, as an app sharing it
/// through an app group needs before iOS suspends it (0xdead10cc).
struct SuspensionTests {
    /// True when another connection can take the write lock at once and
    /// truncate the WAL — which needs every other connection's read and
    /// write locks to be gone.
    static func fileIsFree(_ path: String) throws -> Bool {
        let other = try Connection(path: path, options: ConnectionOptions(busyTimeoutMilliseconds: 0))
        defer { other.close() }
        do {
            try other.execute("BEGIN IMMEDIATE")
            try other.execute("COMMIT")
            try other.truncateWAL()
            return true
        } catch let error as SQLiteError where error.resultCode == .busy || error.resultCode == .locked {
            return false
        }
    }

    /// Waits (bounded) until the engine is suspended and the file free: work
    /// that arrived just before runs in a short window first.
    func waitUntilFree(_ engine: EventEngine, _ path: String) async throws -> Bool {
        try await waitUntil(timeout: 10, interval: 0.01) { try engine.isDatabaseSuspended && Self.fileIsFree(path) }
    }

    func waitUntilSuspended(_ engine: EventEngine, _ suspended: Bool = true) async throws {
        // Generous bounds: the suite runs collector and child processes side by side.
        // A suspended database opens short windows for work that arrives (a
        // listener's position save after a delivery): the state counts as
        // reached when seen, not when read again afterwards.
        try #require(try await waitUntil(timeout: 20, interval: 0.01) { engine.isDatabaseSuspended == suspended })
    }

    @Test("entering the background uploads, then holds no lock or read transaction until active again")
    func backgroundReleasesTheFile() async throws {
        let directory = TemporaryDirectory()
        let listener = CollectingListener()
        let engine = try await startedEngine(directory) { _ in
        } before: { engine in
            engine.events.addDurableObserver(listener, id: "suspension")
        }
        for index in 0..<500 { try engine.record("foreground", parameters: ["i": .int(index)]) }
        try await engine.settle()
        // The listener's position saves reach the database queue after
        // delivery: let them land, so no work arrives once it is suspended.
        await engine.delivery.drain()
        _ = try await engine.query { _ in 0 }

        engine.applicationDidEnterBackground()
        try await waitUntilSuspended(engine)
        #expect(
            try await waitUntilFree(engine, directory.databaseURL.path), "no lock or read transaction while suspended")

        // The app keeps running in the background and records: committed in a
        // short background window, then the database lets go again.
        let outcome = try await engine.recordDurably("background")
        guard case .recorded = outcome else {
            Issue.record("\(outcome)")
            return
        }
        try await waitUntilSuspended(engine)
        #expect(try await waitUntilFree(engine, directory.databaseURL.path), "suspended again after the window")

        engine.applicationDidBecomeActive()
        try await waitUntilSuspended(engine, false)
        try engine.record("foreground_again")
        try await engine.settle()
        #expect(listener.customNames.suffix(2) == ["background", "foreground_again"])
        for name in ["background", "foreground_again"] {
            #expect(try await engine.surveys.evaluate(.eventFrequency(EventFrequency(name, .exactly, 1))), "\(name)")
        }
        await engine.close()
    }

    @Test("a retried start joins the background notifier once")
    func retriedStartRegistersOnce() async throws {
        let directory = TemporaryDirectory()
        // A file where the database's directory goes: the first start fails.
        let blocker = directory.file("later")
        try Data("in the way".utf8).write(to: blocker)
        let engine = EventEngine(
            configuration: EngineConfiguration(database: .file(directory.file("later/spool.sqlite"))))
        await #expect(throws: SpoolError.self) { try await engine.start() }
        try FileManager.default.removeItem(at: blocker)
        try await engine.start()
        #expect(SpoolBackgroundNotifier.registrations(of: engine) == 1)
        await engine.close()
    }

    @Test("the linked SQLite is checked before any file is touched")
    func sqliteRequirements() throws {
        try SQLiteRequirements.check()
        #expect(throws: StorageError.self) {
            try SQLiteRequirements.check(versionNumber: 3_036_000, version: "3.36.0", hasJSONFunctions: true)
        }
        #expect(throws: StorageError.self) {
            try SQLiteRequirements.check(versionNumber: 3_040_001, version: "3.40.1", hasJSONFunctions: false)
        }
        try SQLiteRequirements.check(versionNumber: 3_037_000, version: "3.37.0", hasJSONFunctions: true)
    }

    @Test(
        "the public SpoolBackgroundNotifier suspends and resumes a real second process; the file is free meanwhile",
        .needsChildProcesses)
    func notifierInAnotherProcess() async throws {
        let directory = TemporaryDirectory()
        let path = directory.databaseURL.path
        let child = try ProcessBoundaryTests.Child(
            [path, "suspension", "--suspension", directory.url.path], in: directory, name: "suspension")
        func output() -> String { (try? String(contentsOf: child.output, encoding: .utf8)) ?? "" }
        func waitForLine(_ line: String) async throws {
            // Longer than the child waits for each state, so that its own
            // verdict ("NOT …" with the time it waited) is what a failure shows.
            try await waitUntil(timeout: 60, interval: 0.01) {
                let lines = output().split(separator: "\n")
                return lines.contains(Substring(line)) || lines.contains { $0.hasPrefix("NOT ") }
            }
            try #require(output().split(separator: "\n").contains(Substring(line)), "\(output().suffix(300))")
        }
        func becomesFree() async throws -> Bool {
            try await waitUntil(timeout: 2, interval: 0.01) { try Self.fileIsFree(path) }
        }
        try await waitForLine("SUSPENDED")
        #expect(try await becomesFree(), "the other process holds no lock or read transaction while suspended")
        _ = FileManager.default.createFile(atPath: directory.file("checked1").path, contents: nil)
        try await waitForLine("SUSPENDED2")
        #expect(try await becomesFree(), "free again after the background window")
        _ = FileManager.default.createFile(atPath: directory.file("checked2").path, contents: nil)
        let lines = await child.finish(timeout: 60)
        #expect(lines.last == "DONE", "\(lines.suffix(3))")
        #expect(lines.contains("GOT background") && lines.contains("GOT foreground_again"))
    }

    @Test("a suspended database commits nothing while appends keep coming, and commits them all on resume")
    func suspendedLogHoldsNoLockUnderLoad() async throws {
        let directory = TemporaryDirectory()
        let database = try DatabaseQueue(path: directory.databaseURL.path)
        let log = EventLog(database: database, limits: EventLog.Limits(events: 1_000_000, bytes: 1 << 30))
        let append: @Sendable (Int) -> Void = { index in
            _ = try? log.append(  // try?: a refused append only ends this load early
                EventRecord(name: "load", parametersJSON: #"{"i":\#(index)}"#, recordedAt: 1))
        }
        // A thread appends a burst (bounded: a free-running loop would starve
        // the writer of the log's lock); the database is suspended while the
        // writer commits it, and each check below adds more work itself.
        let appender = Thread { for index in 1...20_000 { append(index) } }
        appender.start()
        try await waitUntil(interval: 0.001) { log.writerCPUPerEvent != nil }  // commits are running
        await database.suspend()
        try await waitUntil(timeout: 60, interval: 0.001) { appender.isFinished }
        var free = 0
        for check in 0..<50 {
            if try Self.fileIsFree(directory.databaseURL.path) { free += 1 }
            // More work arrives between checks.
            for index in 0..<100 { append(-(check * 100 + index)) }
        }
        #expect(free == 50, "the file was free \(free) times in 50 checks while suspended")
        database.resume()
        try await log.waitUntilAllDurable()
        let stored = try database.sync { try $0.scalarInt("SELECT count(*) FROM events") }
        #expect(UInt64(stored) == log.acceptedCount, "every append committed after resume")
        await log.close()
        database.close()
    }

    @Test("a timer firing while suspended is told so and asks for no background window; awake it gets the connection")
    func timersDoNotWakeASuspendedDatabase() async throws {
        let directory = TemporaryDirectory()
        let database = try DatabaseQueue(path: directory.databaseURL.path)
        defer { database.close() }
        let windows = Protected(0)
        database.onDeferredWork.withLock { $0 = { windows.withLock { $0 += 1 } } }
        let firings = Protected<[String]>([])
        func fire() {
            database.timer(after: 0) { firing in
                let name: String
                switch firing {
                case .awake: name = "awake"
                case .suspended: name = "suspended"
                case .closed: name = "closed"
                }
                firings.withLock { $0.append(name) }
            }
        }
        await database.suspend()
        fire()
        #expect(try await waitUntil { firings.withLock { $0 } == ["suspended"] })
        #expect(windows.withLock { $0 } == 0, "no background window was asked for")
        // Work that needs the file is kept, and asks for one.
        database.async { _ in }
        #expect(try await waitUntil { windows.withLock { $0 } == 1 })
        database.resume()
        fire()
        #expect(try await waitUntil { firings.withLock { $0 } == ["suspended", "awake"] })
    }
}
