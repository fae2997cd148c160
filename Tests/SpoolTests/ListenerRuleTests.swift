import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// L1–L12 (docs/BEHAVIOUR.md): the listener rules.
struct ListenerRuleTests {
    @Test("L1: a listener added before start stays registered and receives once a session starts")
    func listenerAddedBeforeStart() async throws {
        let listener = CollectingListener()
        let engine = EventEngine(configuration: EngineConfiguration())
        engine.events.addObserver(listener)
        #expect(listener.names.isEmpty)
        try await engine.start()
        try engine.record("after_start")
        try await engine.settle()
        #expect(listener.names == ["session_start", "after_start"])
        await engine.close()
    }

    @Test("L2: events recorded before a session starts are delivered when it starts, in order")
    func eventsBeforeSessionAreDeliveredInOrder() async throws {
        let listener = CollectingListener()
        let engine = EventEngine(configuration: EngineConfiguration())
        engine.events.addObserver(listener)
        for index in 0..<5 {
            #expect(try engine.record("early_\(index)") == .queuedUntilSessionStart)
        }
        await engine.delivery.drain()
        #expect(listener.names.isEmpty, "nothing is delivered before the session starts")
        try await engine.start()
        try await engine.settle()
        #expect(listener.names == ["session_start"] + (0..<5).map { "early_\($0)" })
        // The same holds between sessions.
        engine.endSession()
        try engine.record("between")
        try await engine.settle()
        #expect(listener.names.last == "early_4")
        engine.startSession()
        try await engine.settle()
        #expect(Array(listener.names.suffix(2)) == ["session_start", "between"])
        await engine.close()
    }

    @Test("L2: the events waiting for a session are bounded like the log; the oldest give way, counted")
    func waitingEventsAreBounded() async throws {
        let listener = CollectingListener()
        let engine = EventEngine(configuration: EngineConfiguration(maximumRetainedEvents: 100))
        engine.events.addObserver(listener)
        let firstDurable = Task { try await engine.recordDurably("w0") }
        try await waitUntil(interval: 0.002) { !engine.state.withLock { $0.gates.waiting.isEmpty } }
        for index in 1..<130 { #expect(try engine.record("w\(index)") == .queuedUntilSessionStart) }
        #expect(try await firstDurable.value == .droppedWhileWaitingForSession)
        #expect(engine.diagnosticCounts.events[.droppedWhileWaitingForSession] == 30)
        #expect(engine.diagnosticCounts.occurrences[.droppedWhileWaitingForSession] == 30)
        try await engine.start()
        try await engine.settle()
        #expect(listener.customNames == (30..<130).map { "w\($0)" })
        await engine.close()
    }

    @Test("L3: opted out or disabled, nothing is recorded, delivered or uploaded")
    func optedOutOrDisabledRecordsNothing() async throws {
        let listener = CollectingListener()
        let engine = try await startedEngine(before: { $0.events.addObserver(listener) })
        engine.setConsent(false)
        #expect(try engine.record("while_opted_out") == .droppedOptedOut)
        engine.setConsent(true)
        engine.setEnabled(false)
        #expect(try engine.record("while_disabled") == .droppedDisabled)
        engine.setEnabled(true)
        try engine.record("allowed")
        try await engine.settle()
        #expect(listener.customNames == ["allowed"])
        // Not stored, so never uploaded.
        let stored = try await engine.storedNames()
        #expect(!stored.contains("while_opted_out") && !stored.contains("while_disabled"))
        #expect(stored.contains("allowed"))

        // Consent withdrawn before start: events waiting for the session are discarded.
        let late = EventEngine(configuration: EngineConfiguration())
        let lateListener = CollectingListener()
        late.events.addObserver(lateListener)
        try late.record("waiting")
        late.setConsent(false)
        try await late.start()
        try await late.settle()
        #expect(lateListener.names.isEmpty)
        #expect(try await late.storedNames().isEmpty)
        await late.close()
        await engine.close()
    }

    @Test("L4: one call per event with name, parameters and a timestamp in seconds since 1970")
    func oneCallPerEventWithSecondsTimestamp() async throws {
        let listener = CollectingListener()
        let engine = try await startedEngine(before: { $0.events.addObserver(listener) })
        let before = Date().timeIntervalSince1970
        try engine.record("purchase", parameters: ["amount": 9.99, "currency": "EUR", "items": 3, "gift": false])
        try await engine.settle()
        let after = Date().timeIntervalSince1970
        let purchases = listener.received.withLock { $0.filter { $0.name == "purchase" } }
        #expect(purchases.count == 1)
        let event = try #require(purchases.first)
        #expect(event.parameters == ["amount": 9.99, "currency": "EUR", "items": 3, "gift": false])
        #expect(event.timestamp >= before - 0.001 && event.timestamp <= after + 0.001, "seconds, not milliseconds")
        await engine.close()
    }

    @Test(
        "L5: custom, default, campaign and session_start events, and events recorded inside a callback, are delivered without recursion"
    )
    func deliveredKindsAndCallbackEvents() async throws {
        let listenerEngine = WeakEngine()
        let depth = Protected(0)
        let maximumDepth = Protected(0)
        let first = CollectingListener("first") { listener, event in
            depth.withLock { $0 += 1 }
            let current = depth.withLock { $0 }
            maximumDepth.withLock { $0 = max($0, current) }
            if event.name == "trigger" {
                _ = try? listenerEngine.value?.record("from_callback", parameters: ["source": "first"])
            }
            depth.withLock { $0 -= 1 }
        }
        let second = CollectingListener("second")
        let engine = try await startedEngine(before: {
            $0.events.addObserver(first)
            $0.events.addObserver(second)
        })
        listenerEngine.value = engine
        for name in ["custom_event", "app_open", "inapp_seen", "push_session", "trigger"] { try engine.record(name) }
        try await engine.settle()
        let expected = [
            "session_start", "custom_event", "app_open", "inapp_seen", "push_session", "trigger", "from_callback",
        ]
        #expect(first.names == expected)
        #expect(second.names == expected, "events recorded in a callback reach every listener")
        #expect(maximumDepth.withLock { $0 } == 1, "no listener call happened inside another")
        await engine.close()
    }

    @Test("L6: events over the limit, flush_event and excluded names are not delivered; flush_event is still stored")
    func notDelivered() async throws {
        let listener = CollectingListener()
        let engine = try await startedEngine(configure: {
            $0.sessionEventLimit = 3
            $0.excludedEventNames = ["internal_metric"]
        }) { $0.events.addObserver(listener) }
        try engine.record("flush_event")
        try engine.record("internal_metric")
        try engine.record("kept")
        #expect(try engine.record("over_limit") == .droppedSessionLimit)
        try await engine.settle()
        #expect(listener.names == ["session_start", "kept"])
        let stored = try await engine.storedNames()
        #expect(stored.contains("flush_event") && stored.contains("internal_metric"), "stored, so uploaded")
        #expect(!stored.contains("over_limit"))

        // The exclusion list can be replaced at run time, as a remote config would.
        engine.startSession()
        engine.setExcludedEventNames(["kept"])
        try engine.record("kept")
        try engine.record("internal_metric")
        try await engine.settle()
        #expect(Array(listener.names.suffix(2)) == ["session_start", "internal_metric"])
        await engine.close()
    }

    @Test("L7: date values arrive as ISO 8601 strings with milliseconds in UTC")
    func datesArriveAsStrings() async throws {
        let listener = CollectingListener()
        let engine = try await startedEngine(before: { $0.events.addObserver(listener) })
        let date = Date(timeIntervalSince1970: 1_764_411_330.123)
        let parameters: [String: EventValue] = ["at": .date(date), "nested": ["when": .date(date)]]
        try engine.record("booked", parameters: parameters)
        try await engine.settle()
        let event = try #require(listener.received.withLock { $0.first { $0.name == "booked" } })
        #expect(event.parameters["at"] == .string("2025-11-29T10:15:30.123Z"))
        #expect(event.parameters["nested"] == .object(["when": .string("2025-11-29T10:15:30.123Z")]))
        let stored = try await engine.query {
            try $0.scalarString("SELECT json_extract(parameters, '$.at') FROM events WHERE name = 'booked'")
        }
        #expect(stored == "2025-11-29T10:15:30.123Z")
        await engine.close()
    }

    @Test(
        "L8: every listener is called on one serial background queue, in record order; a slow listener delays the rest")
    func serialBackgroundQueueInOrder() async throws {
        let trace = Protected<[String]>([])
        let concurrent = Protected((now: 0, peak: 0))
        let callerThread = Protected<Set<String>>([])
        // The slow listener holds e0 until every recording thread is done.
        let released = Protected(false)
        let make: @Sendable (String, Bool) -> CollectingListener = { label, slow in
            CollectingListener(label) { _, event in
                concurrent.withLock {
                    $0.now += 1
                    $0.peak = max($0.peak, $0.now)
                }
                callerThread.withLock { $0.insert(Thread.isMainThread ? "main" : "background") }
                if slow && event.name == "e0" { _ = released.wait(until: Date().addingTimeInterval(10)) { $0 } }
                trace.withLock { $0.append("\(label):\(event.name)") }
                concurrent.withLock { $0.now -= 1 }
            }
        }
        let slow = make("slow", true)
        let fast = make("fast", false)
        let engine = try await startedEngine(before: {
            $0.events.addObserver(slow)
            $0.events.addObserver(fast)
        })
        let recordingThreads = (0..<4).map { thread in
            Thread { for index in 0..<25 { _ = try? engine.record("t\(thread)_\(index)") } }
        }
        try engine.record("e0")
        for thread in recordingThreads { thread.start() }
        try await waitUntil { recordingThreads.allSatisfy(\.isFinished) }
        released.withLock { $0 = true }
        released.broadcast()
        try await engine.settle()
        let order = trace.withLock { $0 }
        // Each event goes to slow, then fast, before the next event starts.
        #expect(order.count == 2 * (1 + 1 + 100))
        for pair in stride(from: 0, to: order.count, by: 2) {
            #expect(order[pair].hasPrefix("slow:") && order[pair + 1].hasPrefix("fast:"))
            #expect(order[pair].dropFirst(5) == order[pair + 1].dropFirst(5))
        }
        #expect(concurrent.withLock { $0.peak } == 1, "never two listener calls at once")
        #expect(callerThread.withLock { $0 } == ["background"])
        // Log order is delivery order.
        let stored = try await engine.storedNames()
        #expect(order.filter { $0.hasPrefix("fast:") }.map { String($0.dropFirst(5)) } == stored)
        await engine.close()
    }

    @Test("L9: adding a listener twice keeps one registration")
    func addingTwiceKeepsOne() async throws {
        let listener = CollectingListener()
        let engine = try await startedEngine(before: {
            $0.events.addObserver(listener)
            $0.events.addObserver(listener)
        })
        engine.events.addObserver(listener)
        try engine.record("once")
        try await engine.settle()
        #expect(listener.customNames == ["once"])
        await engine.close()
    }

    @Test("L10: listeners are held weakly")
    func listenersAreWeak() async throws {
        let kept = CollectingListener()
        let engine = try await startedEngine()
        weak var released: CollectingListener?
        do {
            let temporary = CollectingListener()
            released = temporary
            engine.events.addObserver(temporary)
            engine.events.addObserver(kept)
        }
        #expect(released == nil, "the registry did not keep it alive")
        try engine.record("after_release")
        try await engine.settle()
        #expect(kept.customNames == ["after_release"])
        await engine.close()
    }

    @Test("L11: removeObserver removes only that listener")
    func removeOnlyThatListener() async throws {
        let removed = CollectingListener()
        let staying = CollectingListener()
        let engine = try await startedEngine(before: {
            $0.events.addObserver(removed)
            $0.events.addObserver(staying)
        })
        try engine.record("both")
        try await engine.settle()
        engine.events.removeObserver(removed)
        engine.events.removeObserver(removed)  // twice is harmless
        try engine.record("only_staying")
        try await engine.settle()
        #expect(removed.customNames == ["both"])
        #expect(staying.customNames == ["both", "only_staying"])
        await engine.close()
    }

    @Test("L12: per-session limit, priority events bypass it, events from callbacks count toward it")
    func sessionLimit() async throws {
        let listenerEngine = WeakEngine()
        let listener = CollectingListener("l") { _, event in
            if event.name == "a" { _ = try? listenerEngine.value?.record("from_callback") }
        }
        let engine = try await startedEngine(configure: {
            $0.sessionEventLimit = 3
            $0.priorityEventNames.insert("vip")
        }) { $0.events.addObserver(listener) }
        listenerEngine.value = engine
        try engine.record("a")  // 1; its callback records from_callback (2)
        try await engine.settle()
        try engine.record("b")  // 3
        #expect(try engine.record("c") == .droppedSessionLimit)
        for name in ["inapp_seen", "push_session", "confirmation_page_view", "vip"] {
            #expect(try engine.record(name).isAccepted, "\(name) bypasses the limit")
        }
        try await engine.settle()
        #expect(
            listener.customNames == [
                "a", "from_callback", "b", "inapp_seen", "push_session", "confirmation_page_view", "vip",
            ])
        // A new session starts a new count.
        engine.startSession()
        #expect(try engine.record("c").isAccepted)
        await engine.close()
    }
}

/// Lets listeners built before an engine exists record into it.
final class WeakEngine: Sendable {
    private struct Reference { weak var engine: EventEngine? }
    private let box = Protected(Reference())
    var value: EventEngine? {
        get { box.withLock { $0.engine } }
        set { box.withLock { $0.engine = newValue } }
    }
}
