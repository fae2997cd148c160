import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Real damaged database files for the salvage tests, made the way they
/// happen: a queue file an app left behind, then garbage written over it,
/// its tail cut, its `user_version` lowered at the `sqlite3` prompt, or its
/// WAL deleted after a SIGKILL.
enum DamagedFiles {
    static var sqlite3: String? { SQLiteCLITests.sqlite3 }

    /// Runs `sql` on `path` with the sqlite3 CLI and returns its output,
    /// trimmed.
    @discardableResult
    static func cli(_ path: String, _ sql: String) throws -> String {
        let sqlite3 = try #require(sqlite3, "install the sqlite3 CLI (apt-get install sqlite3)")
        let result = try runProcess(sqlite3, [path, sql])
        try #require(result.status == 0, "sqlite3 \(sql): \(result.error)")
        return result.output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// An uploading engine on the default queue file whose batches are big
    /// enough that nothing goes out until `flush()`.
    static func engine(
        _ directory: TemporaryDirectory, collector: TestCollector,
        configure: (inout EngineConfiguration) -> Void = { _ in }
    ) -> EventEngine {
        var configuration = uploadingConfiguration(
            directory, collector: collector, batchSize: 5_000, timerInterval: 600, maximumRetainedEvents: 10_000)
        configure(&configuration)
        return EventEngine(configuration: configuration)
    }

    /// Leaves a closed queue file with `session_start` and `count` events
    /// waiting for upload, as an app does, and returns the stored events'
    /// ids in log order.
    static func queueFile(
        _ directory: TemporaryDirectory, collector: TestCollector, events count: Int, padding: Int = 200
    ) async throws -> [String] {
        let engine = engine(directory, collector: collector)
        try await engine.start()
        let pad = EventValue.string(String(repeating: "p", count: padding))
        for index in 0..<count { try engine.record("queued", parameters: ["i": .int(index), "pad": pad]) }
        try await engine.settle()
        let ids = try await engine.query { try $0.readEvents(after: 0, limit: .max, now: 0).map(\.id) }
        await engine.close()
        #expect(ids.count == count + 1)
        return ids
    }

    /// `count` bytes no SQLite file starts with.
    static func garbage(_ count: Int) -> Data {
        var generator = SystemRandomNumberGenerator()
        var bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
        bytes[0] = UInt8(ascii: "#")  // never "SQLite format 3"
        return Data(bytes)
    }

    /// The files in `directory` whose names start with `prefix`.
    static func files(in directory: TemporaryDirectory, startingWith prefix: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory.url.path).filter { $0.hasPrefix(prefix) }.sorted()
    }

    /// The recognised damaged copies in `directory` (their database files).
    static func copies(in directory: TemporaryDirectory) throws -> [String] {
        try files(in: directory, startingWith: "OPTEventQueue.damaged-").filter { $0.hasSuffix(".sqlite") }
    }

    /// Starts `engine`, records one more event and uploads everything: what
    /// the collector accepted (ids, each once, in order of first arrival),
    /// and the new event's id.
    static func recordAndUpload(_ engine: EventEngine, collector: TestCollector) async throws -> (
        accepted: [String], newID: String
    ) {
        guard case .recorded(let id) = try await engine.recordDurably("after_salvage") else {
            Issue.record("not recorded")
            return ([], "")
        }
        try await flushUntilDone(engine)
        // The collector logs a request as it answers it: wait for the line.
        #expect(await collector.waitFor { $0.flatMap(\.acceptedIDs).contains(id) })
        // At least once: a request answered after its timeout goes again
        // (collectors deduplicate on the id), so each id counts at its first
        // arrival.
        var seen = Set<String>()
        return (collector.acceptedIDs().filter { seen.insert($0).inserted }, id)
    }
}

extension SmallFileSystem {
    /// Makes the file system read-only: nothing can be created or renamed.
    func remountReadOnly() throws {
        let status = try runProcess("/bin/mount", ["-o", "remount,ro", url.path]).status
        guard status == 0 else { throw TestSetupError("remount refused (\(status))") }
    }
}
