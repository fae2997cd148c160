import Foundation
import Spool
import Testing

/// The public contract (the names docs/BEHAVIOUR.md's rules use), written as
/// a user would, with a plain `import Spool`: if a name drifts or loses
/// `public`, this stops compiling.
struct PublicContractTests {
    final class Forwarder: EventListener {
        let names = Mutexed<[String]>([])
        func onEventRecorded(_ event: RecordedEvent) {
            names.mutate { $0.append(event.name) }
        }
    }

    final class Mutexed<Value: Sendable>: @unchecked Sendable {
        // Safe: `value` is only touched while `lock` is held.
        private let lock = NSLock()
        private var value: Value
        init(_ value: Value) { self.value = value }
        func mutate(_ body: (inout Value) -> Void) {
            lock.lock()
            body(&value)
            lock.unlock()
        }
        var current: Value {
            lock.lock()
            defer { lock.unlock() }
            return value
        }
    }

    struct NullDispatcher: EventDispatcher {
        func dispatchEvent(event: EventForDispatch, completionHandler: DispatchCompletionHandler?) {
            completionHandler?(.response(status: 204, retryAfter: nil, message: nil))
        }
        func flushEvents() {}
    }

    @Test func theContractReadsAsDesigned() async throws {
        let listener = Forwarder()
        let engine = EventEngine(
            configuration: EngineConfiguration(
                collectorURL: URL(string: "https://collector.invalid/v1")!, dispatcher: NullDispatcher()))
        engine.events.addObserver(listener)
        try await engine.start()
        try engine.record("purchase", parameters: ["amount": 9.99, "at": .date(Date())])
        try await engine.flush()  // delivered (and uploaded) before the registration below
        let purchases = Mutexed(0)
        let r = engine.on("purchase") { _ in purchases.mutate { $0 += 1 } }
        try engine.record("purchase", parameters: ["amount": 1])
        let ready = Mutexed(0)
        engine.on(.ready) { _ in ready.mutate { $0 += 1 } }
        try await engine.flush()
        r.cancel()
        r.cancel()
        engine.setConsent(false)
        #expect(try engine.record("after_opt_out") == .droppedOptedOut)
        engine.events.removeObserver(listener)
        await engine.close()

        #expect(listener.names.current == ["session_start", "purchase", "purchase"])
        #expect(purchases.current == 1)
        #expect(ready.current == 1)
        _ = DefaultEventDispatcher(backingStore: .file, dataStoreName: "OPTEventQueue")
        _ = EngineConfiguration(maximumRetainedEvents: 10_000, batchSize: 10, uploadInterval: 60)
        let value: EventValue = ["list": [1, 2.5, "x", true, nil]]
        #expect(try JSONDecoder().decode(EventValue.self, from: JSONEncoder().encode(value)) == value)
        _ = EventForDispatch(url: URL(string: "https://example.invalid")!, body: Data())
    }
}
