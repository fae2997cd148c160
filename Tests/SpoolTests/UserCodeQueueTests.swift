import Foundation
import Testing

@_spi(TransportAuthoring) @testable import Spool
@testable import SpoolStorage

/// The app's code the uploader calls — a custom dispatcher, a transport of
/// one's own — never runs on the database queue (D8, W6): it may block, and
/// the queue commits events and reads the next batch meanwhile.
struct UserCodeQueueTests {
    /// Whether each call came on the engine's database queue.
    final class QueueProbe: Sendable {
        let database = Protected<DatabaseQueue?>(nil)
        let onDatabaseQueue = Protected<[Bool]>([])

        func called() {
            let on = database.withLock { $0 }?.isCurrent ?? false
            onDatabaseQueue.withLock { $0.append(on) }
        }

        func attach(_ engine: EventEngine) throws {
            let log = try #require(engine.state.withLock { $0.log })
            database.withLock { $0 = log.database }
        }
    }

    final class ProbingDispatcher: EventDispatcher {
        let probe = QueueProbe()
        func dispatchEvent(event: EventForDispatch, completionHandler: DispatchCompletionHandler?) {
            probe.called()
            completionHandler?(.response(status: 200, retryAfter: nil, message: nil))
        }
        func flushEvents() {}
    }

    final class ProbingTransport: UploadTransport {
        let probe = QueueProbe()
        func send(_ request: UploadRequest) async throws -> UploadResponse {
            probe.called()
            return UploadResponse(status: 200, headers: [:], body: Data())
        }
    }

    @Test("D8, W6: a custom dispatcher is called off the database queue")
    func dispatcherOffTheQueue() async throws {
        let dispatcher = ProbingDispatcher()
        let engine = EventEngine(
            configuration: EngineConfiguration(
                collectorURL: URL(string: "https://collector.invalid/batch")!, dispatcher: dispatcher))
        try await engine.start()
        try dispatcher.probe.attach(engine)
        for round in 0..<3 {
            try engine.record("event_\(round)")
            try await engine.flush()
        }
        let calls = dispatcher.probe.onDatabaseQueue.withLock { $0 }
        #expect(!calls.isEmpty && !calls.contains(true))
        await engine.close()
    }

    @Test("W6: a transport of one's own is called off the database queue")
    func transportOffTheQueue() async throws {
        let transport = ProbingTransport()
        let engine = EventEngine(
            configuration: EngineConfiguration(
                collectorURL: URL(string: "https://collector.invalid/batch")!, uploadInterval: 3_600,
                dispatcher: DefaultEventDispatcher(backingStore: .memory, transport: transport)))
        try await engine.start()
        try transport.probe.attach(engine)
        for round in 0..<3 {
            try engine.record("event_\(round)")
            try await engine.flush()
        }
        let calls = transport.probe.onDatabaseQueue.withLock { $0 }
        #expect(!calls.isEmpty && !calls.contains(true))
        await engine.close()
    }
}
