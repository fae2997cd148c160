import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Durable listeners: positions in the consumers table, resumed after a
/// restart (P1), told about events the retention bound removed.
struct DurableListenerTests {
    func engine(_ directory: TemporaryDirectory, retained: Int? = 10_000) -> EventEngine {
        EventEngine(
            configuration: EngineConfiguration(database: .file(directory.databaseURL), maximumRetainedEvents: retained))
    }

    @Test(
        "P1: a durable listener added again in the same engine while it lags, or removed and added again, gets no event twice and misses none",
        arguments: [false, true])
    func addedAgainWhileLagging(removedFirst: Bool) async throws {
        let directory = TemporaryDirectory()
        let slow = CollectingListener { _, _ in usleep(2_000) }
        let engine = engine(directory)
        engine.events.addDurableObserver(slow, id: "warehouse")
        try await engine.start()
        for index in 0..<300 { try engine.record("e\(index)") }
        #expect(try await waitUntil(timeout: 30) { slow.customNames.count >= 50 })
        // Its saved position trails what it was given (saved per commit group).
        if removedFirst { engine.events.removeDurableObserver(id: "warehouse") }
        engine.events.addDurableObserver(slow, id: "warehouse")
        for index in 300..<400 { try engine.record("e\(index)") }
        try await engine.settle()
        #expect(try await waitUntil(timeout: 60) { slow.customNames.last == "e399" })
        let names = slow.customNames
        #expect(names == (0..<400).map { "e\($0)" }, "\(names.count) deliveries for 400 events")
        await engine.close()
    }

    @Test(
        "P1: the engine holding a durable listener delivers what another engine on the file records, while it records nothing itself"
    )
    func holderHearsAnotherEngine() async throws {
        let directory = TemporaryDirectory()
        let listener = CollectingListener()
        let holder = engine(directory)
        holder.events.addDurableObserver(listener, id: "app")
        try await holder.start()
        let widget = engine(directory)
        try await widget.start()
        for index in 0..<50 { try widget.record("widget\(index)") }
        try await widget.settle()
        // Within a lease renewal (20 s), with no commit of its own.
        #expect(
            try await waitUntil(timeout: 40) { listener.customNames.filter { $0.hasPrefix("widget") }.count == 50 },
            "\(listener.customNames.count) delivered")
        #expect(listener.customNames.filter { $0.hasPrefix("widget") } == (0..<50).map { "widget\($0)" })
        await widget.close()
        await holder.close()
    }

    @Test("P1: a durable listener resumes after a restart with the events it missed, before new ones")
    func resumesAfterRestart() async throws {
        let directory = TemporaryDirectory()

        // Run 1: the listener sees a, b, c.
        let first = CollectingListener()
        let run1 = engine(directory)
        run1.events.addDurableObserver(first, id: "crm")
        try await run1.start()
        for name in ["a", "b", "c"] { try run1.record(name) }
        await run1.close()
        #expect(first.customNames == ["a", "b", "c"])

        // Run 2: the app runs without adding the listener; d and e happen.
        let run2 = engine(directory)
        try await run2.start()
        try run2.record("d")
        try run2.record("e")
        await run2.close()

        // Run 3: added again under the same id, it gets d, e (and run 2's
        // session_start) before anything new.
        let third = CollectingListener()
        let run3 = engine(directory)
        run3.events.addDurableObserver(third, id: "crm")
        try await run3.start()
        try run3.record("f")
        try await run3.settle()
        #expect(third.names == ["session_start", "d", "e", "session_start", "f"])
        let position = try await run3.query { try $0.position(of: "listener:crm") }
        let head = try await run3.query { try $0.headPosition() }
        #expect(position == head, "its position advanced as it finished")
        await run3.close()
    }

    @Test("P1: events are kept until every durable listener passed them, then deleted")
    func eventsAreKeptUntilEveryConsumerPassed() async throws {
        let directory = TemporaryDirectory()
        let fast = CollectingListener("fast")
        let engine = engine(directory)
        engine.events.addDurableObserver(fast, id: "fast")
        try await engine.start()
        // A second durable listener that was registered once and is absent now
        // holds the events back.
        let absent = CollectingListener("absent")
        engine.events.addDurableObserver(absent, id: "absent")
        try await engine.settle()
        // Attached (its position saved) before it goes: settle() does not wait
        // for an attach, and removing it first left no row to hold anything
        // (this failed 2 runs in 5 when the test ran alone).
        #expect(
            try await waitUntil {
                try engine.databaseQueue!.sync {
                    try $0.scalarInt("SELECT count(*) FROM consumers WHERE id = 'listener:absent'")
                } == 1
            })
        engine.events.removeDurableObserver(id: "absent")
        for index in 0..<20 { try engine.record("e\(index)") }
        try await engine.settle()
        _ = try await engine.query { _ in 0 }  // the position saves queued by delivery have landed
        let rows = try await engine.query {
            try $0.scalarString("SELECT group_concat(id || '=' || position) FROM consumers")
        }
        #expect(try await engine.query { try $0.countEvents(after: 0) } >= 20, "\(rows) \(absent.names)")
        // Forgetting it releases them.
        engine.events.removeDurableObserver(id: "absent", forget: true)
        try await engine.settle()
        #expect(try await waitUntil { try engine.databaseQueue!.sync { try $0.countEvents(after: 0) } == 0 })
        await engine.close()
    }

    @Test("a durable listener that fell behind the retained window is told how many events it missed")
    func fallingBehindTheWindowIsReported() async throws {
        let directory = TemporaryDirectory()
        let missed = Protected(0)
        let setup = engine(directory, retained: 100)
        let listener = CollectingListener()
        setup.events.addDurableObserver(listener, id: "slow")
        try await setup.start()
        try await setup.settle()
        await setup.close()

        // While the listener is away, 500 events arrive; the log keeps 100.
        let busy = engine(directory, retained: 100)
        try await busy.start()
        for index in 0..<500 { try busy.record("e\(index)") }
        await busy.close()

        let back = engine(directory, retained: 100)
        let returning = CollectingListener()
        back.events.addDurableObserver(returning, id: "slow") { count in missed.withLock { $0 += count } }
        try await back.start()
        try await back.settle()
        let received = returning.names.filter { $0.hasPrefix("e") }
        #expect(received.count < 500 && !received.isEmpty)
        #expect(received.last == "e499", "the newest events were kept")
        // Every event after its position is accounted for: received or missed.
        // 501 events came after its position: run 2's session_start and e0…e499.
        #expect(missed.withLock { $0 } + received.count == 501)
        let dropped = try await back.query { try $0.droppedCount(of: "listener:slow") }
        #expect(dropped == missed.withLock { $0 })
        await back.close()
    }

    @Test("an attached durable listener hears every event live, so the retention bound costs it nothing")
    func attachedListenerIsNotToldOfFalseDrops() async throws {
        let directory = TemporaryDirectory()
        let missed = Protected(0)
        // Slow: it holds its first event until all 300 are committed, long
        // after the log has let all but the last 50 go.
        let released = Protected(false)
        let slow = CollectingListener { _, _ in _ = released.wait(until: Date().addingTimeInterval(10)) { $0 } }
        let first = engine(directory, retained: 50)
        first.events.addDurableObserver(slow, id: "slow") { count in missed.withLock { $0 += count } }
        try await first.start()
        for index in 0..<300 { try first.record("e\(index)") }
        let database = try #require(first.databaseQueue)
        #expect(try await waitUntil { try database.sync { try $0.headPosition() } >= 300 })
        released.withLock { $0 = true }
        released.broadcast()
        await first.close()
        #expect(slow.customNames.count == 300, "every event arrived, though the log kept only 50")
        #expect(missed.withLock { $0 } == 0)

        let again = CollectingListener()
        let second = engine(directory, retained: 50)
        second.events.addDurableObserver(again, id: "slow") { count in missed.withLock { $0 += count } }
        try await second.start()
        try await second.settle()
        #expect(missed.withLock { $0 } == 0, "no drops reported for events it had received")
        #expect(again.customNames.isEmpty, "nothing is delivered twice")
        await second.close()
    }

    @Test("P1: a durable listener in a SIGKILLed process resumes in the next one, at least once", .needsChildProcesses)
    func resumesAfterSIGKILL() async throws {
        let child = buildProductsDirectory.appendingPathComponent("spool-crash-child").path
        try #require(FileManager.default.isExecutableFile(atPath: child))
        let directory = TemporaryDirectory()
        var acknowledged: [String] = []
        var deliveredBeforeKill: [String] = []
        for round in 0..<3 {
            let (lines, _) = try await runUntilKilled(
                child, [directory.databaseURL.path, "engine\(round)", "--engine"], milliseconds: 50 + 100 * round,
                afterLine: "ACK ")
            acknowledged += lines.filter { $0.hasPrefix("ACK ") }.map { String($0.dropFirst(4)) }
            deliveredBeforeKill += lines.filter { $0.hasPrefix("GOT ") }.map { String($0.dropFirst(4)) }
        }
        #expect(!acknowledged.isEmpty)

        // The next launch: the same durable listener gets everything it had
        // not finished.
        let received = Protected<[String]>([])
        let resumed = CollectingListener { _, event in
            if let id = event.parameters["id"]?.stringValue { received.withLock { $0.append(id) } }
        }
        let engine = engine(directory, retained: nil)
        engine.events.addDurableObserver(resumed, id: "crash")
        try await engine.start()
        try await engine.settle()
        let seen = Set(deliveredBeforeKill).union(received.withLock { $0 })
        let lost = acknowledged.filter { !seen.contains($0) }
        #expect(lost.isEmpty, "\(lost.count) acknowledged events never reached the durable listener")
        await engine.close()
    }

    @Test("a durable listener's lease is renewed every 20 s of the clock, and skipped while suspended")
    func leaseRenewalFollowsTheClockAndSkipsWhileSuspended() async throws {
        let clock = ManualClock()
        let listener = CollectingListener()
        let engine = try await startedEngine(
            TemporaryDirectory(), configure: { $0.clock = clock },
            before: { $0.events.addDurableObserver(listener, id: "renewed") })
        let database = try #require(engine.databaseQueue)
        func expiry() throws -> Double? { try database.sync { try $0.lease(of: "listener:renewed")?.expires } }
        #expect(try expiry() == clock.now + DurableListeners.leaseDuration)
        clock.advance(by: DurableListeners.leaseRenewal)
        #expect(try await waitUntil { try expiry() == clock.now + DurableListeners.leaseDuration })

        // Suspended: the renewal that comes due is skipped and asks for no window.
        let windows = Protected(0)
        database.onDeferredWork.withLock { $0 = { windows.withLock { $0 += 1 } } }
        let (renewed, ran) = (try expiry(), clock.timersRun)
        await database.suspend()
        clock.advance(by: DurableListeners.leaseRenewal)
        #expect(try await waitUntil { clock.timersRun > ran })
        #expect(windows.withLock { $0 } == 0, "a renewal asked for a background window")
        database.resume()
        #expect(try expiry() == renewed, "not renewed while suspended")
        clock.advance(by: DurableListeners.leaseRenewal)
        #expect(try await waitUntil { try expiry() == clock.now + DurableListeners.leaseDuration })
        await engine.close()
    }
}
