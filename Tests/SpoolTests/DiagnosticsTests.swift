import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// What Spool cannot return to a caller reaches the diagnostics channel.
struct DiagnosticsTests {
    @Test("commit failures, their recovery and refused records reach the handler, the stream and the counts")
    func failuresAndRecoveryAreReported() async throws {
        let directory = TemporaryDirectory()
        let handled = Protected<[SpoolDiagnostic.Kind]>([])
        let engine = try await startedEngine(directory) { configuration in
            configuration.writeBuffer = WriteBufferLimit(maximumEvents: 20, maximumBytes: 1 << 20)
            configuration.diagnosticHandler = { diagnostic in handled.withLock { $0.append(diagnostic.kind) } }
        }
        let stream = engine.diagnostics()
        try await engine.query { try $0.capAtCurrentSize() }
        let big = EventValue.string(String(repeating: "x", count: 200_000))
        await #expect(throws: SpoolError.self) { try await engine.recordDurably("big", parameters: ["pad": big]) }
        var refused = 0
        for _ in 0..<40 {
            do { try engine.record("big", parameters: ["pad": big]) } catch SpoolError.bufferFull { refused += 1 }
        }
        #expect(refused > 0)
        try await engine.query { try $0.uncap() }
        try await engine.settle()

        var streamed: [SpoolDiagnostic.Kind] = []
        for await diagnostic in stream {
            streamed.append(diagnostic.kind)
            if diagnostic.kind == .commitRecovered { break }
        }
        #expect(streamed.contains(.commitFailed) && streamed.contains(.recordRefused))
        let counts = engine.diagnosticCounts
        #expect(counts.occurrences[.commitFailed, default: 0] >= 1)
        #expect(counts.occurrences[.commitRecovered] == 1)
        #expect(counts.events[.recordRefused] == refused)
        await engine.close()
        #expect(handled.withLock { $0.contains(.commitFailed) && $0.contains(.commitRecovered) })
    }

    @Test("close() reports the events it could not commit, and returns how many")
    func closeReportsWhatItCouldNotCommit() async throws {
        let directory = TemporaryDirectory()
        let handled = Protected<[SpoolDiagnostic]>([])
        let engine = try await startedEngine(directory) { configuration in
            configuration.diagnosticHandler = { diagnostic in handled.withLock { $0.append(diagnostic) } }
        }
        try await engine.query { try $0.capAtCurrentSize() }
        let big = EventValue.string(String(repeating: "x", count: 200_000))
        for _ in 0..<5 { try engine.record("big", parameters: ["pad": big]) }
        let uncommitted = await engine.close()
        #expect(uncommitted == 5)
        let report = handled.withLock { $0.first { $0.kind == .uncommittedAtClose } }
        #expect(report?.eventCount == 5)
        #expect(sqliteCode(report?.error) == .full, "\(String(describing: report))")
    }

    @Test("a lease that cannot be released at close is reported under its owner's kind")
    func aLeaseNotReleasedIsReportedAsItsOwners() async throws {
        let directory = TemporaryDirectory()
        var configuration = EngineConfiguration(database: .file(directory.databaseURL))
        configuration.collectorURL = URL(string: "http://127.0.0.1:9/collect")
        configuration.dispatcher = FailingDispatcher()
        let reported = Protected<[SpoolDiagnostic]>([])
        configuration.diagnosticHandler = { diagnostic in reported.withLock { $0.append(diagnostic) } }
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        try engine.record("one")
        // The failed upload leaves the uploader holding its lease.
        await expectUploadDeferred { try await engine.flush() }
        #expect(try await engine.query { try $0.lease(of: Uploader.consumerID) } != nil)
        try await engine.query { try $0.execute("PRAGMA query_only = ON") }  // every write now fails
        await engine.close()
        await engine.delivery.drain()  // the handler runs on the delivery queue
        let leases = reported.withLock { $0.filter { $0.message.contains("lease") } }
        #expect(leases.map(\.kind) == [.uploadFailed], "\(leases)")

        // A durable listener's lease, without an uploader, is the listener's stall.
        let listener = CollectingListener()
        let local = try await startedEngine(
            TemporaryDirectory(), before: { engine in engine.events.addDurableObserver(listener, id: "kept") })
        try await local.query { try $0.execute("PRAGMA query_only = ON") }
        await local.close()
        #expect(local.diagnosticCounts.occurrences[.durableListenerStalled] == 1)
        #expect(local.diagnosticCounts.occurrences[.uploadFailed] == nil)
    }

    /// A custom dispatcher whose collector is never reachable.
    struct FailingDispatcher: EventDispatcher {
        func dispatchEvent(event: EventForDispatch, completionHandler: DispatchCompletionHandler?) {
            completionHandler?(.transportFailure("unreachable"))
        }
        func flushEvents() {}
    }

    @Test("a second close() does nothing and reports nothing")
    func closingTwiceIsQuiet() async throws {
        let directory = TemporaryDirectory()
        let handled = Protected<[SpoolDiagnostic.Kind]>([])
        let listener = CollectingListener()
        let engine = try await startedEngine(directory) { configuration in
            configuration.diagnosticHandler = { diagnostic in handled.withLock { $0.append(diagnostic.kind) } }
        } before: { engine in
            engine.events.addDurableObserver(listener, id: "twice")
        }
        try engine.record("one")
        #expect(await engine.close() == 0)
        #expect(await engine.close() == 0)
        #expect(handled.withLock { $0.isEmpty }, "\(handled.withLock { $0 })")
    }
}
