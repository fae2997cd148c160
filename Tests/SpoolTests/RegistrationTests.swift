import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// S4–S6 (docs/BEHAVIOUR.md) and the AsyncSequence front.
struct RegistrationTests {
    @Test("S4: cancel is idempotent and never removes another registration sharing the callback")
    func cancelIsIdempotentAndKeyedByID() async throws {
        let engine = try await startedEngine()
        let calls = Protected<[String]>([])
        let shared: @Sendable (RecordedEvent) -> Void = { event in calls.withLock { $0.append(event.name) } }
        let first = engine.on("tap", shared)
        let second = engine.on("tap", shared)
        #expect(first.id != second.id)
        try engine.record("tap")
        try await engine.settle()
        #expect(calls.withLock { $0 } == ["tap", "tap"])
        first.cancel()
        first.cancel()
        #expect(first.isCancelled && !second.isCancelled)
        try engine.record("tap")
        try await engine.settle()
        #expect(calls.withLock { $0 } == ["tap", "tap", "tap"], "the second registration still fires")
        await engine.close()
    }

    @Test("S4: discarding the handle does not cancel")
    func discardingTheHandleKeepsListening() async throws {
        let engine = try await startedEngine()
        let count = Protected(0)
        _ = engine.on("ping") { _ in count.withLock { $0 += 1 } }
        try engine.record("ping")
        try engine.record("ping")
        try await engine.settle()
        #expect(count.withLock { $0 } == 2)
        await engine.close()
    }

    @Test("S5: dispatch is snapshotted; a callback cancelling itself or another cannot make a later one miss the event")
    func dispatchIsSnapshotted() async throws {
        let engine = try await startedEngine()
        let calls = Protected<[String]>([])
        let registrations = Protected<[Registration]>([])
        let first = engine.on("go") { event in
            calls.withLock { $0.append("first:\(event.parameters["n"]?.intValue ?? -1)") }
            // Cancel itself and the one after it, mid-dispatch.
            for registration in registrations.withLock({ $0 }) { registration.cancel() }
        }
        let second = engine.on("go") { event in
            calls.withLock { $0.append("second:\(event.parameters["n"]?.intValue ?? -1)") }
        }
        let third = engine.on("go") { event in
            calls.withLock { $0.append("third:\(event.parameters["n"]?.intValue ?? -1)") }
        }
        registrations.withLock { $0 = [first, second] }
        try engine.record("go", parameters: ["n": 1])
        try engine.record("go", parameters: ["n": 2])
        try await engine.settle()
        #expect(calls.withLock { $0 } == ["first:1", "second:1", "third:1", "third:2"])
        third.cancel()
        await engine.close()
    }

    @Test("S6: ready fires once when start settles; a late subscriber gets it at once, once")
    func readyReplaysForLateSubscribers() async throws {
        let engine = EventEngine(configuration: EngineConfiguration())
        let early = Protected(0)
        engine.on(.ready) { event in
            #expect(event.name == "ready")
            early.withLock { $0 += 1 }
        }
        try engine.record("before_start")
        try await engine.start()
        try await engine.settle()
        #expect(early.withLock { $0 } == 1)

        let late = Protected(0)
        let registration = engine.on(.ready) { _ in late.withLock { $0 += 1 } }
        #expect(late.withLock { $0 } == 1, "called at once, before on() returned")
        registration.cancel()
        engine.startSession()
        try engine.record("more")
        try await engine.settle()
        #expect(early.withLock { $0 } == 1 && late.withLock { $0 } == 1, "never again")
        await engine.close()
    }

    @Test("S6: ready waits for the events recorded before start to be delivered")
    func readyComesAfterStartUpEvents() async throws {
        let engine = EventEngine(configuration: EngineConfiguration())
        let order = Protected<[String]>([])
        engine.on(.everyEvent) { event in order.withLock { $0.append(event.name) } }
        engine.on(.ready) { _ in order.withLock { $0.append("ready") } }
        try engine.record("early")
        try await engine.start()
        try await engine.settle()
        #expect(order.withLock { $0 } == ["session_start", "early", "ready"])
        await engine.close()
    }

    @Test func streamsDeliverInOrderWithTheSameGatesAndEndOnClose() async throws {
        let engine = try await startedEngine(configure: { $0.excludedEventNames = ["hidden"] })
        let stream = engine.events.stream()
        let names = ["a", "hidden", "flush_event", "b", "c"]
        for name in names { try engine.record(name) }
        try await engine.settle()
        let collector = Task {
            var received: [String] = []
            for await event in stream { received.append(event.name) }
            return received
        }
        await engine.close()
        #expect(await collector.value == ["a", "b", "c"])
    }
}
