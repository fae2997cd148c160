import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

struct EngineLifecycleTests {
    @Test func initDoesNoIOAndStartOpensTheFile() async throws {
        let directory = TemporaryDirectory()
        let engine = EventEngine(configuration: EngineConfiguration(database: .file(directory.databaseURL)))
        #expect(!FileManager.default.fileExists(atPath: directory.databaseURL.path))
        try await engine.start()
        #expect(FileManager.default.fileExists(atPath: directory.databaseURL.path))
        await #expect(throws: SpoolError.self) { try await engine.start() }
        await engine.close()
        #expect(throws: SpoolError.closed) { try engine.record("late") }
        await #expect(throws: SpoolError.closed) { try await engine.start() }
    }

    @Test("uploadStatistics() before start() says the engine is not started, with a collectorURL or without")
    func uploadStatisticsBeforeStartSaysNotStarted() async throws {
        var configuration = EngineConfiguration()
        configuration.collectorURL = URL(string: "http://127.0.0.1:9/collect")
        let uploading = EventEngine(configuration: configuration)
        await #expect(throws: SpoolError.notStarted) { try await uploading.uploadStatistics() }
        try await uploading.start()
        #expect(try await uploading.uploadStatistics().pending >= 0)
        await uploading.close()
        await #expect(throws: SpoolError.closed) { try await uploading.uploadStatistics() }

        let local = try await startedEngine()
        await #expect(throws: SpoolError.notUploading) { try await local.uploadStatistics() }
        await local.close()
    }

    @Test("a start that fails (a file where the database's directory goes) can be retried, and keeps what was recorded")
    func aFailedStartCanBeRetried() async throws {
        let directory = TemporaryDirectory()
        let blocker = directory.file("not-yet")
        try Data("in the way".utf8).write(to: blocker)
        let database = directory.file("not-yet/spool.sqlite")
        let engine = EventEngine(configuration: EngineConfiguration(database: .file(database)))
        try engine.record("waiting")
        await #expect {
            try await engine.start()
        } throws: { error in
            guard case SpoolError.cannotOpen(let path, let reason) = error else { return false }
            return path == database.path && reason.hasPrefix("its directory cannot be created: ")
        }
        try FileManager.default.removeItem(at: blocker)
        try await engine.start()
        try await engine.settle()
        #expect(try await engine.storedNames() == ["session_start", "waiting"], "nothing recorded before was lost")
        await engine.close()
    }

    @Test("start() creates the database's directory, with its parents, when it is missing")
    func startCreatesAMissingDirectory() async throws {
        let directory = TemporaryDirectory()
        let database = directory.file("Application Support/analytics/spool.sqlite")
        let engine = EventEngine(configuration: EngineConfiguration(database: .file(database)))
        try await engine.start()
        try engine.record("first")
        try await engine.settle()
        #expect(try await engine.storedNames() == ["session_start", "first"])
        await engine.close()
        #expect(FileManager.default.fileExists(atPath: database.path))
    }

    @Test func closeDuringStartLeavesNothingOpen() async throws {
        for _ in 0..<20 {
            let directory = TemporaryDirectory()
            let engine = EventEngine(configuration: EngineConfiguration(database: .file(directory.databaseURL)))
            async let started: Void = engine.start()
            await engine.close()
            _ = try? await started
            #expect(throws: SpoolError.closed) { try engine.record("after") }
        }
    }

    @Test("close() while start() is opening returns once the file is closed")
    func closeWhileStartIsOpeningWaitsForTheFileToClose() async throws {
        let directory = TemporaryDirectory()
        // A durable listener with one event to catch up on: start() is held
        // inside its catch-up, with the file open, at the gate.
        let earlier = try await startedEngine(
            directory, before: { engine in engine.events.addDurableObserver(CollectingListener(), id: "slow") })
        earlier.events.removeDurableObserver(id: "slow")
        try await earlier.recordDurably("missed")
        await earlier.close()
        let gate = Gate()
        let slow = CollectingListener { _, _ in gate.pass() }
        let engine = EventEngine(configuration: EngineConfiguration(database: .file(directory.databaseURL)))
        engine.events.addDurableObserver(slow, id: "slow")
        let starting = Task { try await engine.start() }
        #expect(try await waitUntil(timeout: 60) { gate.reached })
        let closing = Task {
            await engine.close()
            return FileManager.default.fileExists(atPath: directory.databaseURL.path + "-wal")
        }
        #expect(try await waitUntil(timeout: 60) { engine.state.withLock { $0.isClosed } })
        gate.open()
        let walLeftOpen = await closing.value
        #expect(!gate.timedOut)
        #expect(!walLeftOpen, "close() returned with the database open")
        if let open = openFileDescriptors(under: directory.url) { #expect(open == 0) }
        await #expect(throws: SpoolError.closed) { try await starting.value }
        await #expect(throws: SpoolError.closed) { try await engine.start() }
    }

    @Test func recordDurablyReturnsOnceCommitted() async throws {
        let directory = TemporaryDirectory()
        let engine = EventEngine(configuration: EngineConfiguration(database: .file(directory.databaseURL)))
        // Before start: returns once the session starts and the commit lands.
        async let early = engine.recordDurably("early")
        try await waitUntil { !engine.state.withLock { $0.gates.waiting.isEmpty } }
        try await engine.start()
        guard case .recorded(let earlyID) = try await early else {
            Issue.record("not recorded")
            return
        }
        let outcome = try await engine.recordDurably("late", parameters: ["n": 1])
        guard case .recorded(let lateID) = outcome else {
            Issue.record("\(outcome)")
            return
        }
        let ids = try await engine.query { try $0.readEvents(after: 0, limit: 10, now: 0).map(\.id) }
        #expect(ids.contains(earlyID) && ids.contains(lateID))
        engine.setConsent(false)
        #expect(try await engine.recordDurably("gated") == .droppedOptedOut)
        await engine.close()
    }

    // MARK: - recordDurably never hangs

    @Test("recordDurably waiting for a session returns droppedOptedOut when consent is withdrawn")
    func withdrawingConsentResumesAWaitingRecordDurably() async throws {
        let engine = EventEngine(configuration: EngineConfiguration())
        let waiting = Task { try await engine.recordDurably("before_start") }
        try await waitUntil { !engine.state.withLock { $0.gates.waiting.isEmpty } }
        engine.setConsent(false)
        #expect(try await waiting.value == .droppedOptedOut)
        await engine.close()
    }

    @Test("recordDurably waiting for a session throws closed when the engine closes before it starts")
    func closingBeforeStartResumesAWaitingRecordDurably() async throws {
        let engine = EventEngine(configuration: EngineConfiguration())
        let waiting = Task { try await engine.recordDurably("before_start") }
        try await waitUntil { !engine.state.withLock { $0.gates.waiting.isEmpty } }
        await engine.close()
        await #expect(throws: SpoolError.closed) { _ = try await waiting.value }
    }

    @Test("recordDurably waiting for a session when a started engine closes: stored without a session, recorded")
    func closingAStartedEngineStoresWaitingEvents() async throws {
        let directory = TemporaryDirectory()
        let engine = try await startedEngine(directory)
        engine.endSession()
        let waiting = Task { try await engine.recordDurably("between_sessions") }
        try await waitUntil { !engine.state.withLock { $0.gates.waiting.isEmpty } }
        await engine.close()
        guard case .recorded(let id) = try await waiting.value else {
            Issue.record("not recorded")
            return
        }
        let reopened = try DatabaseQueue(path: directory.databaseURL.path)
        defer { reopened.close() }
        let stored = try reopened.sync { try $0.readEvents(after: 0, limit: 10, now: 0) }
        #expect(stored.contains { $0.id == id && $0.sessionID == nil })
    }

    @Test("file protection and backup exclusion default to what background work needs; no effect on Linux")
    func filePolicyDefaults() async throws {
        let configuration = EngineConfiguration()
        #expect(configuration.fileProtection == .completeUntilFirstUserAuthentication)
        #expect(configuration.excludesFromBackup)
        #expect(configuration.suspendsInBackground)
        let directory = TemporaryDirectory()
        let engine = try await startedEngine(directory) { $0.fileProtection = .complete }
        #expect(engine.diagnosticCounts.occurrences[.filePolicyNotApplied] == nil)
        await engine.close()
    }

    // MARK: - Lifetimes

    @Test("after close(), the engine, its log, its database queue and its connections are freed")
    func closeFreesEverything() async throws {
        let directory = TemporaryDirectory()
        weak var weakEngine: EventEngine?
        weak var weakLog: EventLog?
        weak var weakDatabase: DatabaseQueue?
        let listener = CollectingListener()
        do {
            let engine = try await startedEngine(directory) { configuration in
                configuration.collectorURL = URL(string: "http://127.0.0.1:9/unused")
            } before: { engine in
                engine.events.addObserver(listener)
                engine.events.addDurableObserver(listener, id: "lifetime")
            }
            try engine.record("one")
            _ = engine.on("one") { _ in }
            try await engine.settle()
            let log = try #require(engine.state.withLock { $0.log })
            (weakEngine, weakLog, weakDatabase) = (engine, log, log.database)
            await engine.close()
        }
        try await waitUntil { weakEngine == nil && weakLog == nil && weakDatabase == nil }
        #expect(weakEngine == nil)
        #expect(weakLog == nil)
        #expect(weakDatabase == nil)
    }

    @Test("an engine dropped without close() is freed with its log, database queue and connections")
    func droppingWithoutCloseFreesEverything() async throws {
        let directory = TemporaryDirectory()
        weak var weakEngine: EventEngine?
        weak var weakLog: EventLog?
        weak var weakDatabase: DatabaseQueue?
        do {
            let engine = try await startedEngine(directory)
            try engine.record("one")
            try await engine.settle()
            let log = try #require(engine.state.withLock { $0.log })
            (weakEngine, weakLog, weakDatabase) = (engine, log, log.database)
        }
        try await waitUntil { weakEngine == nil && weakLog == nil && weakDatabase == nil }
        #expect(weakEngine == nil)
        #expect(weakLog == nil)
        #expect(weakDatabase == nil)
        // A weak reference reads nil as soon as deinit starts; the files close
        // during it, possibly on another thread.
        if openFileDescriptors(under: directory.url) != nil {
            let closed = try await waitUntil { openFileDescriptors(under: directory.url) == 0 }
            #expect(closed, "the connections' files are closed")
        }
        // And what it recorded is on disk.
        let reopened = try DatabaseQueue(path: directory.databaseURL.path)
        defer { reopened.close() }
        #expect(
            try reopened.sync { try $0.readEvents(after: 0, limit: 10, now: 0).map(\.name) } == [
                "session_start", "one",
            ])
    }

    @Test("close() returns with none of the engine's files open, its high-water mark included (100 cycles)")
    func closeLeavesNoFileOpen() async throws {
        let directory = TemporaryDirectory()
        guard openFileDescriptors(under: directory.url) != nil else { return }  // Linux names descriptors
        var open: [Int] = []
        for cycle in 0..<100 {
            let engine = EventEngine(configuration: EngineConfiguration(database: .file(directory.databaseURL)))
            try await engine.start()
            _ = try engine.record("cycle")
            await engine.close()
            if openFileDescriptors(under: directory.url) != 0 { open.append(cycle) }
        }
        #expect(open.isEmpty, "files still open right after close() in cycles \(open)")
    }

    @Test(
        "1,000 start/close cycles in a fresh process keep open file descriptors and resident memory flat",
        .needsChildProcesses)
    func manyCyclesStayFlat() async throws {
        let directory = TemporaryDirectory()
        // One malloc arena (glibc; ignored elsewhere): with one per thread,
        // the engine's threads landing on different arenas grow the resident
        // size by a few hundred bytes a cycle without any leak, and the
        // bound below would measure the allocator instead of Spool.
        let child = try ProcessBoundaryTests.Child(
            [directory.databaseURL.path, "cycles", "--cycles", "1000"], in: directory, name: "cycles",
            environment: ["MALLOC_ARENA_MAX": "1"])
        let lines = await child.finish(timeout: 240)
        func measurement(_ prefix: String) throws -> (descriptors: Int, resident: Int) {
            let line = try #require(lines.first { $0.hasPrefix(prefix + " ") }, "\(lines.suffix(3))")
            let fields = line.split(separator: " ").dropFirst().compactMap { Int($0) }
            try #require(fields.count == 2)
            return (fields[0], fields[1])
        }
        let before = try measurement("BEFORE")
        let after = try measurement("AFTER")
        print(
            "1,000 start/close cycles: descriptors \(before.descriptors) → \(after.descriptors), "
                + "RSS \(before.resident >> 10) → \(after.resident >> 10) KiB")
        // The child names its descriptors on Linux: a difference says which file.
        let named = lines.filter { $0.hasPrefix("DESCRIPTORS ") }
        #expect(after.descriptors == before.descriptors, "no file descriptor leaks: \(named)")
        // Under the thread sanitizer resident memory is mostly its shadow.
        if before.resident > 0 && !isThreadSanitized {
            #expect(
                after.resident < before.resident + 2 << 20,
                "resident memory grew \((after.resident - before.resident) >> 10) KiB over 1,000 cycles")
        }
    }
}

/// How many of this process's file descriptors are open on files under
/// `directory` (other tests running in parallel do not count), or nil where
/// the platform cannot tell a descriptor's path.
func openFileDescriptors(under directory: URL) -> Int? {
    #if os(Linux)
        let prefix = directory.resolvingSymlinksInPath().path
        return (0..<Int32(4_096)).reduce(0) { count, descriptor in
            var buffer = [CChar](repeating: 0, count: 4_096)
            let length = readlink("/proc/self/fd/\(descriptor)", &buffer, buffer.count - 1)
            guard length > 0 else { return count }
            return count
                + (String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self).hasPrefix(prefix)
                    ? 1 : 0)
        }
    #else
        return nil
    #endif
}
