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

    @Test func aFailedStartCanBeRetried() async throws {
        let directory = TemporaryDirectory()
        let missing = directory.file("not-yet/spool.sqlite")
        let engine = EventEngine(configuration: EngineConfiguration(database: .file(missing)))
        try engine.record("waiting")
        await #expect(throws: SpoolError.self) { try await engine.start() }
        try FileManager.default.createDirectory(
            at: missing.deletingLastPathComponent(), withIntermediateDirectories: true)
        try await engine.start()
        try await engine.settle()
        #expect(try await engine.storedNames() == ["session_start", "waiting"], "nothing recorded before was lost")
        await engine.close()
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

    @Test func recordDurablyReturnsOnceCommitted() async throws {
        let directory = TemporaryDirectory()
        let engine = EventEngine(configuration: EngineConfiguration(database: .file(directory.databaseURL)))
        // Before start: returns once the session starts and the commit lands.
        async let early = engine.recordDurably("early")
        try await Task.sleep(for: .milliseconds(20))
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
        let ids = try await engine.query { try $0.readEvents(after: 0, limit: 10).map(\.id) }
        #expect(ids.contains(earlyID) && ids.contains(lateID))
        engine.setConsent(false)
        #expect(try await engine.recordDurably("gated") == .droppedOptedOut)
        await engine.close()
    }
}
