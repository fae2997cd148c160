import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Erasure and `reencryptAll()` while another process holds the WAL's
/// checkpoint lock, as another engine's background checkpoint does for a
/// moment at a time.
struct ErasureContentionTests {
    #if os(Linux) || os(macOS)
        /// A second process holding the checkpoint lock of `database`'s WAL
        /// (byte 121 of the `-shm` file, where SQLite's unix VFS takes it)
        /// until told to let it go.
        final class CheckpointLockHolder: @unchecked Sendable {
            // Safe: the descriptors are written once, in init.
            private let process: ChildProcess
            private let input: FileHandle
            private let output: FileHandle

            static let script = """
                import fcntl, os, sys
                fd = os.open(sys.argv[1], os.O_RDWR)
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 121, 0)
                print("locked", flush=True)
                sys.stdin.readline()
                fcntl.lockf(fd, fcntl.LOCK_UN, 1, 121, 0)
                print("released", flush=True)
                sys.stdin.read()
                """

            init(_ database: URL) async throws {
                let (inputPipe, outputPipe) = (try ChildProcess.pipe(), try ChildProcess.pipe())
                defer { for end in [inputPipe.read, outputPipe.write] { close(end) } }  // the child's ends
                process = try ChildProcess(
                    "/usr/bin/env", ["python3", "-c", Self.script, database.path + "-shm"],
                    standardInput: inputPipe.read, standardOutput: outputPipe.write)
                input = FileHandle(fileDescriptor: inputPipe.write, closeOnDealloc: true)
                output = FileHandle(fileDescriptor: outputPipe.read, closeOnDealloc: true)
                let line = await readLine()
                guard line == "locked" else { throw TestSetupError("the lock holder said \(line.debugDescription)") }
            }

            /// The next line the holder writes ("" when it ended).
            private func readLine() async -> String {
                await onOwnThread { [output] in
                    var line: [UInt8] = []
                    // try?: a closed pipe ends the line.
                    while let byte = try? output.read(upToCount: 1)?.first, byte != UInt8(ascii: "\n") {
                        line.append(byte)
                    }
                    return String(decoding: line, as: UTF8.self)
                }
            }

            /// Lets the lock go; returns once it is free.
            func release() async throws {
                input.write(Data("\n".utf8))
                let line = await readLine()
                guard line == "released" else { throw TestSetupError("the lock holder said \(line.debugDescription)") }
            }

            func end() async {
                try? input.close()  // try?: already closed is the same end
                await onOwnThread { [process] in process.waitUntilExit() }
            }
        }
    #endif

    /// The file's erasure count, read on a connection of the test's own.
    static func erasures(_ database: URL) throws -> Int {
        try reading(database) { try $0.scalarInt("SELECT erasures FROM log_head WHERE id = 1") }
    }

    /// What `body` reads on a connection of the test's own.
    static func reading<T>(_ database: URL, _ body: (Connection) throws -> T) throws -> T {
        let connection = try Connection(path: database.path, options: ConnectionOptions())
        defer { connection.close() }
        return try body(connection)
    }

    @Test(
        "eraseAllData() while another process checkpoints: it waits for the checkpoint lock and leaves no trace (P9)",
        .needsChildProcesses
    )
    func erasureWaitsForAnotherCheckpoint() async throws {
        #if os(Linux) || os(macOS)
            let directory = TemporaryDirectory()
            let engine = try await startedEngine(directory)
            let database = directory.databaseURL
            for index in 0..<200 {
                let email = "\(PrivacyTests.marker)-\(index)@example.com"
                try engine.record(PrivacyTests.marker, parameters: ["email": .string(email)])
            }
            try await engine.settle()
            let before = try Self.erasures(database)

            let holder = try await CheckpointLockHolder(database)
            let erasure = Task { try await engine.eraseAllData() }
            // The rows are deleted (the erasure is counted) before the WAL is
            // truncated: that truncation meets the lock, which goes a moment later.
            try await waitUntil(timeout: 10) { try Self.erasures(database) > before }
            try await holder.release()
            await holder.end()
            try await erasure.value

            let found = PrivacyTests.occurrences(of: PrivacyTests.marker, besides: database)
            #expect(found.values.reduce(0, +) == 0, "marker occurrences after erasure: \(found)")
            await engine.close()
        #endif
    }

    @Test(
        "an app killed (SIGKILL) between an erasure's transaction and its rebuild: the next start leaves no trace (P9)",
        .needsChildProcesses
    )
    func aKilledErasureIsFinishedAtStart() async throws {
        let directory = TemporaryDirectory()
        let database = directory.databaseURL
        let marker = "KILLEDERASURE\(UInt32.random(in: 1_000_000...9_999_999))"
        let child = buildProductsDirectory.appendingPathComponent("spool-crash-child").path
        // It kills itself with SIGKILL once its erasure has committed.
        let ended = try await runProcess(child, [database.path, marker, "--killed-erasure"])
        try #require(ended.status == SIGKILL && ended.output == "COMMITTED\n", "\(ended)")
        // The file stays open elsewhere (an app extension): no clean close
        // checkpoints the WAL away meanwhile.
        let other = try Connection(path: database.path, options: ConnectionOptions(busyTimeoutMilliseconds: 0))
        defer { other.close() }
        #expect(try other.pendingRebuild() != nil)
        let left = PrivacyTests.occurrences(of: marker, besides: database)
        #expect(left.values.reduce(0, +) > 0, "the erased bytes wait in the files: \(left)")

        let engine = try await startedEngine(directory)
        #expect(try other.pendingRebuild() == nil)
        let found = PrivacyTests.occurrences(of: marker, besides: database)
        #expect(found.values.reduce(0, +) == 0, "marker occurrences after the next start: \(found)")
        await engine.close()
    }

    @Test(
        "a start leaves a rebuild another running engine has noted to it, and finishes one whose process ended (P9)",
        .needsChildProcesses
    )
    func aRebuildUnderWayIsLeftToItsEngine() async throws {
        let directory = TemporaryDirectory()
        let database = directory.databaseURL
        let engine = try await startedEngine(directory)
        // The note of a rebuild under way in a running engine, as an erasure
        // or reencryptAll() writes it before its rebuild.
        let owner = engine.leaseOwner
        try await engine.query { try $0.notePendingRebuild(at: 1, owner: owner) }
        let second = try await startedEngine(directory)
        #expect(try Self.pendingRebuild(database)?.owner == owner, "left to the engine doing it")
        await second.close()

        // The same note from a process that has ended.
        let ended = try await runProcess("/bin/sh", ["-c", "echo $$"])
        let gone = "pid \(ended.output.trimmingCharacters(in: .whitespacesAndNewlines)) #1"
        #expect(!LeaseOwner.isAlive(gone))
        try await engine.query { try $0.notePendingRebuild(at: 1, owner: gone) }
        let third = try await startedEngine(directory)
        #expect(try Self.pendingRebuild(database) == nil, "finished by the next start")
        await third.close()
        await engine.close()
    }

    /// The note of a rebuild still to finish, read on a connection of the test's own.
    static func pendingRebuild(_ database: URL) throws -> (since: Double, owner: String?)? {
        try reading(database) { try $0.pendingRebuild() }
    }

    @Test(
        "an erasure held from its rebuild past the busy timeout is finished by a later start, which reports when it cannot (P9)",
        .needsChildProcesses
    )
    func anUnfinishedErasureIsFinishedAtStart() async throws {
        #if os(Linux) || os(macOS)
            let directory = TemporaryDirectory()
            let database = directory.databaseURL
            let heard = Protected<[SpoolDiagnostic]>([])
            var configuration = EngineConfiguration(database: .file(database))
            configuration.diagnosticHandler = { diagnostic in
                if diagnostic.kind == .erasureUnfinished { heard.withLock { $0.append(diagnostic) } }
            }
            let engine = EventEngine(configuration: configuration)
            try await engine.start()
            for index in 0..<200 {
                let email = "\(PrivacyTests.marker)-\(index)@example.com"
                try engine.record(PrivacyTests.marker, parameters: ["email": .string(email)])
            }
            try await engine.settle()

            // Another process holds the checkpoint lock for longer than the
            // busy timeout: the rows go, their bytes stay in the WAL. With
            // the file open elsewhere (`other`, as an app extension keeps
            // it), closing does not checkpoint the WAL away either.
            let other = try Connection(path: database.path, options: ConnectionOptions(busyTimeoutMilliseconds: 0))
            defer { other.close() }
            let holder = try await CheckpointLockHolder(database)
            await #expect(throws: SpoolError.self) { try await engine.eraseAllData() }
            await engine.close()
            try await holder.release()
            await holder.end()
            #expect(try Self.pendingRebuild(database) != nil)
            let left = PrivacyTests.occurrences(of: PrivacyTests.marker, besides: database)
            #expect(left.values.reduce(0, +) > 0, "the erased bytes wait in the files: \(left)")

            // A start while a reader holds the WAL past the busy timeout
            // cannot finish it: it says so, and starts.
            try other.execute("BEGIN")
            _ = try other.scalarInt("SELECT count(*) FROM log_head")
            let held = EventEngine(configuration: configuration)
            try await held.start()
            #expect(heard.withLock { $0.count } == 1, "\(heard.withLock { $0 })")
            await held.close()
            try other.execute("COMMIT")
            #expect(try Self.pendingRebuild(database) != nil)

            // The next start finishes it.
            let next = EventEngine(configuration: configuration)
            try await next.start()
            #expect(try Self.pendingRebuild(database) == nil)
            let found = PrivacyTests.occurrences(of: PrivacyTests.marker, besides: database)
            #expect(found.values.reduce(0, +) == 0, "marker occurrences after the next start: \(found)")
            #expect(heard.withLock { $0.count } == 1)
            await next.close()
        #endif
    }
}
