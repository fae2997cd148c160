import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Promises that cross a process boundary, tested with real second processes
/// (Tests/CrashChild) on one database file.
@Suite(.needsChildProcesses)
struct ProcessBoundaryTests {
    /// A running child process whose standard output goes to a file (a pipe
    /// could fill up and stall it).
    struct Child {
        #if os(Linux) || os(macOS)
            let process: ChildProcess
        #endif
        let output: URL

        init(
            _ arguments: [String], in directory: TemporaryDirectory, name: String, environment: [String: String] = [:]
        ) throws {
            let child = buildProductsDirectory.appendingPathComponent("spool-crash-child").path
            try #require(FileManager.default.isExecutableFile(atPath: child), "build the package first: \(child)")
            output = directory.file("\(name).out")
            _ = FileManager.default.createFile(atPath: output.path, contents: nil)
            #if os(Linux) || os(macOS)
                let written = try ChildProcess.writing(to: output)
                defer { close(written) }
                process = try ChildProcess(
                    child, arguments, environment: ProcessInfo.processInfo.environment.merging(environment) { $1 },
                    standardOutput: written)
            #else
                throw TestFacilities.Missing.childProcesses
            #endif
        }

        /// What the child printed so far, a line each.
        func lines() -> [String] {
            // try?: nothing printed yet reads as no line.
            ((try? String(contentsOf: output, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }

        /// Waits for the child to exit (bounded), killing it past `timeout`.
        func finish(timeout: TimeInterval) async -> [String] {
            #if os(Linux) || os(macOS)
                // try?: only cancellation, after which the child is killed below.
                _ = try? await waitUntil(timeout: timeout, interval: 0.05) { !process.isRunning }
                if process.isRunning { sendSIGKILL() }
            #endif
            let text = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").map(String.init)
        }

        /// Kills the child at once and waits for it to go.
        func sendSIGKILL() {
            #if os(Linux) || os(macOS)
                process.send(SIGKILL)
                process.waitUntilExit()
            #endif
        }

        /// The child's exit status, once it has exited.
        var terminationStatus: Int32 {
            #if os(Linux) || os(macOS)
                return process.terminationStatus
            #else
                return -1
            #endif
        }
    }

    @Test(
        "two processes starting together on a new file record and upload: nothing lost, nothing accepted twice, no SQLITE_BUSY"
    )
    func twoProcessesShareOneFile() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let path = directory.databaseURL.path
        #expect(!FileManager.default.fileExists(atPath: path), "a new file")
        let seconds = 10.0
        let startAt = Date().timeIntervalSince1970 + 1.5
        let workers = try (0..<2).map { index in
            try Child(
                [path, "w\(index)", "--worker", collector.url.absoluteString, "\(startAt)", "\(seconds)"],
                in: directory, name: "worker\(index)")
        }
        var outputs: [[String]] = []
        for worker in workers { outputs.append(await worker.finish(timeout: seconds + 60)) }

        for (index, lines) in outputs.enumerated() {
            #expect(lines.first == "READY", "worker \(index) started: \(lines.prefix(3))")
            #expect(lines.last == "DONE", "worker \(index) finished: \(lines.suffix(3))")
            let errors = lines.filter { $0.hasPrefix("ERR") || $0.hasPrefix("STARTFAIL") }
            #expect(errors.isEmpty, "worker \(index): \(errors.prefix(5))")
        }
        let acknowledged = outputs.flatMap { $0.filter { $0.hasPrefix("ACK ") }.map { String($0.dropFirst(4)) } }
        let busy = outputs.reduce(0) { $0 + $1.filter { $0 == "BUSY" }.count }

        // Whatever a worker left queued at exit goes out now, from a third engine.
        let drainer = EventEngine(
            configuration: EngineConfiguration(
                database: .file(directory.databaseURL), maximumRetainedEvents: nil, collectorURL: collector.url,
                batchSize: 100, dispatcher: DefaultEventDispatcher(requestTimeout: 5), retryPolicy: fastRetry))
        try await drainer.start()
        try await waitUntil(timeout: 5, interval: 0.1) {
            // A failed flush leaves the events queued: the next poll tries again.
            do { try await drainer.flush() } catch {}
            return try await drainer.uploadStatistics().pending == 0
        }
        await drainer.close()

        let accepted = collector.acceptedIDs()
        var timesAccepted: [String: Int] = [:]
        for id in accepted { timesAccepted[id, default: 0] += 1 }
        let lost = acknowledged.filter { timesAccepted[$0] == nil }
        let twice = timesAccepted.filter { $0.value > 1 }
        print(
            "two processes, \(Int(seconds)) s: acknowledged \(acknowledged.count), lost \(lost.count), "
                + "accepted twice \(twice.count), SQLITE_BUSY seen by callers \(busy), requests \(collector.requests().count)"
        )
        #expect(acknowledged.count > 100, "both workers recorded")
        #expect(lost.isEmpty, "acknowledged but never accepted: \(lost.prefix(5))")
        #expect(twice.isEmpty, "accepted twice: \(twice.keys.prefix(5))")
        #expect(busy == 0)
    }

    @Test("four processes opening one new file at the same moment all start (five rounds)")
    func manyProcessesOpenANewFileTogether() async throws {
        for round in 0..<5 {
            let directory = TemporaryDirectory()
            let startAt = Date().timeIntervalSince1970 + 0.8
            let children = try (0..<4).map { index in
                try Child(
                    [directory.databaseURL.path, "o\(index)", "--open", "\(startAt)"], in: directory,
                    name: "open\(index)")
            }
            for (index, child) in children.enumerated() {
                let lines = await child.finish(timeout: 30)
                #expect(lines.first == "READY", "round \(round), process \(index): \(lines.prefix(2))")
            }
        }
    }

    @Test(
        "a full disk (RLIMIT_FSIZE): failed commits say stillBuffered and commit later, bufferFull refuses, nothing duplicated"
    )
    func fullDiskInAChildProcess() async throws {
        let directory = TemporaryDirectory()
        let path = directory.databaseURL.path
        let child = try Child([path, "disk", "--disk-full", "\(600_000)"], in: directory, name: "disk")
        let lines = await child.finish(timeout: 120)
        #expect(child.terminationStatus == 0, "\(lines.suffix(3))")
        func markers(_ prefix: String) -> [String] {
            lines.filter { $0.hasPrefix(prefix + " ") }.map { String($0.split(separator: " ")[1]) }
        }
        let (acked, buffered, queued, refused) = (
            markers("ACK"), markers("BUFFERED"), markers("QUEUED"), markers("REFUSED")
        )
        let errors = lines.filter { $0.hasPrefix("ERR") }
        print(
            "full disk: \(acked.count) acknowledged, \(buffered.count) stillBuffered, \(queued.count) queued, "
                + "\(refused.count) refused (bufferFull), \(errors.count) other errors; \(lines.suffix(2).joined(separator: "; "))"
        )
        #expect(buffered.count >= 10, "commits failed under the limit: \(lines.suffix(5))")
        #expect(!refused.isEmpty, "the bound refused new events while commits failed")
        #expect(errors.isEmpty, "\(errors.prefix(3))")
        #expect(lines.contains("CLOSED 0"), "everything accepted was committed once space came back")

        let connection = try Connection(path: path, options: ConnectionOptions())
        defer { connection.close() }
        var stored: [String: Int] = [:]
        for event in try connection.readEvents(after: 0, limit: .max, now: 0) {
            let marker = EventValue.parameters(fromJSON: event.parametersJSON)["id"]?.stringValue ?? ""
            stored[marker, default: 0] += 1
        }
        for marker in acked + buffered + queued { #expect(stored[marker] == 1, "\(marker) stored exactly once") }
        for marker in refused { #expect(stored[marker] == nil, "\(marker) was refused, never stored") }
        let diagnostics = try #require(lines.first { $0.hasPrefix("DIAG") })
        #expect(!diagnostics.contains("commitFailed=0") && !diagnostics.contains("commitRecovered=0"), "\(diagnostics)")
    }

    @Test("a durable listener id belongs to one process at a time; another takes over when the holder dies")
    func durableListenerHeldByAnotherProcess() async throws {
        let directory = TemporaryDirectory()
        let holder = try Child([directory.databaseURL.path, "holder", "--engine"], in: directory, name: "holder")
        try await waitUntil(interval: 0.05) {
            ((try? String(contentsOf: holder.output, encoding: .utf8)) ?? "").contains("GOT ")
        }
        let diagnostics = Protected<[SpoolDiagnostic.Kind]>([])
        let listener = CollectingListener()
        let engine = try await startedEngine(directory) { configuration in
            configuration.maximumRetainedEvents = nil
            configuration.diagnosticHandler = { diagnostic in diagnostics.withLock { $0.append(diagnostic.kind) } }
        } before: { engine in
            engine.events.addDurableObserver(listener, id: "crash")
        }
        for index in 0..<5 { try await engine.recordDurably("mine", parameters: ["id": .string("mine-\(index)")]) }
        try await engine.settle()
        #expect(diagnostics.withLock { $0.contains(.durableListenerHeldElsewhere) })
        #expect(listener.received.withLock { $0.isEmpty }, "nothing is delivered here while the other process holds it")

        // The holder delivers every event in the log, whichever process
        // recorded it: these reach its listener (it prints GOT <marker>).
        holder.sendSIGKILL()
        let holderLines = await holder.finish(timeout: 10)
        let gotByHolder = Set(holderLines.filter { $0.hasPrefix("GOT mine-") }.map { String($0.dropFirst(4)) })

        // The holder is gone: this process takes the listener over.
        for index in 0..<5 { try await engine.recordDurably("later", parameters: ["id": .string("later-\(index)")]) }
        func received(_ prefix: String) -> Set<String> {
            Set(
                listener.received.withLock { $0.compactMap { $0.parameters["id"]?.stringValue } }.filter {
                    $0.hasPrefix(prefix)
                })
        }
        try await waitUntil(timeout: 20, interval: 0.05) { received("later-").count >= 5 }
        #expect(received("later-") == Set((0..<5).map { "later-\($0)" }), "taken over after the holder died")
        #expect(
            gotByHolder.union(received("mine-")) == Set((0..<5).map { "mine-\($0)" }),
            "every event recorded here while the other process held the listener reached it there or here")
        await engine.close()
    }

    @Test(
        "a really full file system (a 4 MB tmpfs): stillBuffered, bufferFull, then everything committed once, when space returns",
        .enabled(if: SmallFileSystem.canMount, "mounting a tmpfs needs root and CAP_SYS_ADMIN; skipped without them")
    )
    func fullFileSystem() async throws {
        let directory = TemporaryDirectory()
        // 4 MB: a new file's schema takes about 0.5 MB (16 KiB pages) and
        // its WAL after start() over 1 MB, so what the filler takes, and
        // gives back, is room for the checkpoint to grow the file.
        let mount = try SmallFileSystem(at: directory.file("fs"), megabytes: 4)
        defer { mount.unmount() }
        var configuration = EngineConfiguration(
            database: .file(mount.url.appendingPathComponent("spool.sqlite")),
            writeBuffer: WriteBufferLimit(maximumEvents: 30, maximumBytes: 1 << 20))
        // The disk itself running full: without the free-space minimum,
        // which would stop the file growing first (FreeSpaceTests).
        configuration.minimumFreeDiskSpace = nil
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        let padding = EventValue.string(String(repeating: "f", count: 1_500))
        var (acked, buffered, queued, refused) = ([String](), [String](), [String](), [String]())
        for index in 0..<5 {
            _ = try await engine.recordDurably("fs_event", parameters: ["id": .string("a\(index)"), "pad": padding])
            acked.append("a\(index)")
        }
        let filler = try mount.fill()
        for index in 0..<2_000 where buffered.count < 5 {
            let marker = "b\(index)"
            do {
                _ = try await engine.recordDurably("fs_event", parameters: ["id": .string(marker), "pad": padding])
                acked.append(marker)
            } catch SpoolError.stillBuffered(_, let reason) {
                #expect(reason.resultCode == .full, "\(reason)")
                buffered.append(marker)
            }
        }
        for index in 0..<60 {
            let marker = "c\(index)"
            do {
                try engine.record("fs_event", parameters: ["id": .string(marker), "pad": padding])
                queued.append(marker)
            } catch SpoolError.bufferFull {
                refused.append(marker)
            }
        }
        #expect(buffered.count == 5 && !refused.isEmpty, "buffered \(buffered.count), refused \(refused.count)")
        try FileManager.default.removeItem(at: filler)  // space comes back
        try await engine.settle()  // the next retry commits what waited
        _ = try await engine.recordDurably("fs_event", parameters: ["id": "after", "pad": padding])
        let counts = engine.diagnosticCounts
        #expect((counts.occurrences[.commitFailed] ?? 0) > 0 && (counts.occurrences[.commitRecovered] ?? 0) > 0)
        let stored = try await engine.query { connection in
            try connection.readEvents(after: 0, limit: .max, now: 0).map {
                EventValue.parameters(fromJSON: $0.parametersJSON)["id"]?.stringValue ?? ""
            }
        }
        await engine.close()
        for marker in acked + buffered + queued + ["after"] {
            #expect(stored.filter { $0 == marker }.count == 1, "\(marker) stored exactly once")
        }
        for marker in refused { #expect(!stored.contains(marker), "\(marker) was refused, never stored") }
        print(
            "full tmpfs: \(acked.count) acknowledged, \(buffered.count) stillBuffered (SQLITE_FULL), "
                + "\(queued.count) queued, \(refused.count) refused; all committed once after space returned")
    }
}

/// A tmpfs of a few megabytes, mounted for one test: a file system that
/// really fills up (ENOSPC, SQLITE_FULL).
struct SmallFileSystem {
    let url: URL

    /// Whether this process may mount one (root with CAP_SYS_ADMIN, Linux).
    static let canMount: Bool = {
        #if os(Linux)
            let probe = FileManager.default.temporaryDirectory.appendingPathComponent("spool-tmpfs-probe-\(getpid())")
            guard (try? FileManager.default.createDirectory(at: probe, withIntermediateDirectories: true)) != nil,
                let mounted = try? SmallFileSystem(at: probe, megabytes: 1)
            else { return false }
            mounted.unmount()
            return true
        #else
            return false
        #endif
    }()

    init(at url: URL, megabytes: Int) throws {
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        let status = try runProcess("/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", url.path]).status
        guard status == 0 else { throw TestSetupError("mount refused (\(status))") }
        self.url = url
    }

    /// Writes a file until the file system is full and returns it.
    func fill() throws -> URL {
        let filler = url.appendingPathComponent("filler")
        let descriptor = open(filler.path, O_WRONLY | O_CREAT, 0o600)
        guard descriptor >= 0 else { throw TestSetupError("cannot create \(filler.path)") }
        defer { close(descriptor) }
        let chunk = [UInt8](repeating: 0, count: 4_096)
        while write(descriptor, chunk, chunk.count) > 0 {}
        return filler
    }

    func unmount() {
        // try?: a test's last step. A test that failed before closing its
        // engine leaves the file system busy: detach it anyway (lazily), so
        // it goes once the process lets go rather than staying mounted.
        if (try? runProcess("/bin/umount", [url.path]))?.status != 0 {
            _ = try? runProcess("/bin/umount", ["-l", url.path])
        }
    }
}
