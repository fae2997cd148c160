import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Promises that cross a process boundary, tested with real second processes
/// (Tests/CrashChild) on one database file.
struct ProcessBoundaryTests {
    /// A running child process whose standard output goes to a file (a pipe
    /// could fill up and stall it).
    struct Child {
        let process: Process
        let output: URL

        init(_ arguments: [String], in directory: TemporaryDirectory, name: String) throws {
            let child = buildProductsDirectory.appendingPathComponent("spool-crash-child").path
            try #require(FileManager.default.isExecutableFile(atPath: child), "build the package first: \(child)")
            output = directory.file("\(name).out")
            _ = FileManager.default.createFile(atPath: output.path, contents: nil)
            process = Process()
            process.executableURL = URL(fileURLWithPath: child)
            process.arguments = arguments
            process.standardOutput = try FileHandle(forWritingTo: output)
            process.standardError = FileHandle.nullDevice
            try process.run()
        }

        /// Waits for the child to exit (bounded), killing it past `timeout`.
        func finish(timeout: TimeInterval) async -> [String] {
            let deadline = Date().addingTimeInterval(timeout)
            while process.isRunning && Date() < deadline {
                try? await Task.sleep(nanoseconds: 50_000_000)  // try?: only cancellation; the loop is bounded
            }
            if process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
            }
            let text = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").map(String.init)
        }
    }

    @Test(
        "two processes starting together on a new file record and upload: nothing lost, nothing accepted twice, no SQLITE_BUSY"
    )
    func twoProcessesShareOneFile() async throws {
        let directory = TemporaryDirectory()
        let collector = try TestCollector(directory)
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
                dispatcher: DefaultEventDispatcher(batchSize: 100, requestTimeout: 5), retryPolicy: fastRetry))
        try await drainer.start()
        for _ in 0..<50 where try await drainer.uploadStatistics().pending > 0 {
            do { try await drainer.flush() } catch { try await Task.sleep(nanoseconds: 100_000_000) }
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

    @Test("a full disk (RLIMIT_FSIZE): failed commits say stillBuffered and commit later, bufferFull refuses, nothing duplicated")
    func fullDiskInAChildProcess() async throws {
        let directory = TemporaryDirectory()
        let path = directory.databaseURL.path
        let child = try Child([path, "disk", "--disk-full", "\(600_000)"], in: directory, name: "disk")
        let lines = await child.finish(timeout: 120)
        #expect(child.process.terminationStatus == 0, "\(lines.suffix(3))")
        func markers(_ prefix: String) -> [String] {
            lines.filter { $0.hasPrefix(prefix + " ") }.map { String($0.split(separator: " ")[1]) }
        }
        let (acked, buffered, queued, refused) = (markers("ACK"), markers("BUFFERED"), markers("QUEUED"), markers("REFUSED"))
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
        for event in try connection.readEvents(after: 0, limit: .max) {
            let marker = EventValue.parameters(fromJSON: event.parametersJSON)["id"]?.stringValue ?? ""
            stored[marker, default: 0] += 1
        }
        for marker in acked + buffered + queued { #expect(stored[marker] == 1, "\(marker) stored exactly once") }
        for marker in refused { #expect(stored[marker] == nil, "\(marker) was refused, never stored") }
        let diagnostics = try #require(lines.first { $0.hasPrefix("DIAG") })
        #expect(!diagnostics.contains("commitFailed=0") && !diagnostics.contains("commitRecovered=0"), "\(diagnostics)")
    }
}
