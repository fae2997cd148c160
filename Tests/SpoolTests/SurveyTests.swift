import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// S1–S3 (docs/BEHAVIOUR.md): lifecycle events, trigger candidacy,
/// EVENT_FREQUENCY over the persisted history.
struct SurveyTests {
    /// Collects triggers.
    final class TriggerLog: Sendable {
        let triggers = Protected<[SurveyTrigger]>([])
        var surveyIDs: [String] { triggers.withLock { $0.map(\.surveyID) } }
        var pairs: [String] { triggers.withLock { $0.map { "\($0.surveyID)<-\($0.event.name)" } } }
    }

    func engine(_ directory: TemporaryDirectory? = nil, triggers: TriggerLog) async throws -> EventEngine {
        let engine = try await startedEngine(directory)
        engine.surveys.onTrigger { trigger in triggers.triggers.withLock { $0.append(trigger) } }
        return engine
    }

    @Test("S1: lifecycle events are recorded like custom events: stored, delivered, in the history")
    func lifecycleEventsAreRecordedLikeCustomEvents() async throws {
        let listener = CollectingListener()
        let engine = try await startedEngine(before: { $0.events.addObserver(listener) })
        let onShown = Protected(0)
        engine.on(.survey(.shown)) { _ in onShown.withLock { $0 += 1 } }
        try engine.surveys.register(Survey(id: "nps"))
        try engine.surveys.mark(.shown, "nps", parameters: ["survey_id": "another", "variant": "b"])
        try engine.surveys.mark(.questionAnswered, "nps", parameters: ["question_id": "q1", "answer": 9])
        try engine.surveys.mark(.dismissed, "nps")
        try engine.surveys.mark(.closed, "nps")
        try engine.surveys.mark(.completed, "nps")
        try await engine.settle()
        let lifecycle = SurveyLifecycleEvent.allCases.map(\.rawValue)
        let delivered = listener.names.filter(lifecycle.contains)
        #expect(
            delivered == [
                "survey_shown", "survey_question_answered", "survey_dismissed", "survey_closed", "survey_completed",
            ])
        let answered = try #require(listener.received.withLock { $0.first { $0.name == "survey_question_answered" } })
        #expect(answered.parameters == ["survey_id": "nps", "question_id": "q1", "answer": 9])
        let shown = try #require(listener.received.withLock { $0.first { $0.name == "survey_shown" } })
        #expect(shown.parameters == ["survey_id": "nps", "variant": "b"], "the app's parameters, survey_id set by Spool")
        #expect(onShown.withLock { $0 } == 1, "on() subscriptions work for each lifecycle event")
        let stored = try await engine.storedNames()
        #expect(lifecycle.allSatisfy(stored.contains), "stored, so uploaded")
        let history = try await engine.query {
            try $0.scalarString("SELECT group_concat(name) FROM event_history WHERE name LIKE 'survey_%'")
        }
        #expect(history.split(separator: ",").count == 5)
        await engine.close()
    }

    @Test("S2: a wildcard survey matches any other event but never its own survey_dismissed")
    func wildcardSurveyIsNotRetriggeredByItsLifecycle() async throws {
        let triggers = TriggerLog()
        let engine = try await engine(triggers: triggers)
        try engine.surveys.register(Survey(id: "anything"))
        try engine.record("screen_view")
        try await engine.settle()
        #expect(triggers.pairs == ["anything<-screen_view"])
        // The app shows it, the user dismisses it: no re-trigger.
        try engine.surveys.mark(.shown, "anything")
        try engine.surveys.mark(.dismissed, "anything")
        try engine.surveys.mark(.completed, "anything")
        try engine.record("flush_event")
        try await engine.settle()
        #expect(triggers.pairs == ["anything<-screen_view"], "lifecycle events and the heartbeat are never candidates")
        try engine.record("purchase")
        try await engine.settle()
        #expect(triggers.pairs == ["anything<-screen_view", "anything<-purchase"])
        await engine.close()
    }

    @Test("S2: named triggers match only their events, and lifecycle names never, even when listed")
    func namedTriggers() async throws {
        let triggers = TriggerLog()
        let engine = try await engine(triggers: triggers)
        try engine.surveys.register(Survey(id: "checkout", triggerEventNames: ["purchase", "survey_completed"]))
        try engine.surveys.register(Survey(id: "onboarding", triggerEventNames: ["signup"]))
        for name in ["screen_view", "purchase", "signup"] { try engine.record(name) }
        try engine.surveys.mark(.completed, "checkout")
        try await engine.settle()
        #expect(triggers.pairs == ["checkout<-purchase", "onboarding<-signup"])
        await engine.close()
    }

    @Test("S3: EVENT_FREQUENCY counts lifecycle events like any other")
    func frequencyCountsLifecycleEvents() async throws {
        let triggers = TriggerLog()
        let engine = try await engine(triggers: triggers)
        try engine.surveys.register(Survey(id: "first"))
        // Shown only to users who completed at least two surveys.
        try engine.surveys.register(
            Survey(
                id: "loyal", triggerEventNames: ["app_open"],
                conditions: .eventFrequency(EventFrequency("survey_completed", .atLeast, 2))))
        try engine.record("app_open")
        try await engine.settle()
        #expect(!triggers.surveyIDs.contains("loyal"))
        try engine.surveys.mark(.completed, "first")
        try engine.surveys.mark(.completed, "first")
        try engine.record("app_open")
        try await engine.settle()
        #expect(triggers.surveyIDs.filter { $0 == "loyal" }.count == 1)
        #expect(try await engine.surveys.evaluate(.eventFrequency(EventFrequency("survey_completed", .exactly, 2))))
        await engine.close()
    }

    @Test("S3: at least, at most, exactly, windows and all/any combinations over the history")
    func frequencyConditions() async throws {
        let engine = try await startedEngine()
        let now = Date().timeIntervalSince1970
        // Five purchases: three this week, two two months ago.
        try await engine.query { connection in
            for (index, age) in [1.0, 2, 3, 60, 61].enumerated() {
                try connection.withStatement("INSERT INTO event_history (name, recorded_at) VALUES ('purchase', ?)") {
                    try $0.bind(now - age * 86_400 - Double(index), at: 1)
                    try $0.step()
                }
            }
        }
        func holds(_ condition: SurveyCondition) async throws -> Bool { try await engine.surveys.evaluate(condition) }
        let f = { (comparison: EventFrequency.Comparison, count: Int, window: EventFrequency.Window) in
            SurveyCondition.eventFrequency(EventFrequency("purchase", comparison, count, in: window))
        }
        #expect(try await holds(f(.atLeast, 5, .ever)))
        #expect(try await !holds(f(.atLeast, 6, .ever)))
        #expect(try await holds(f(.exactly, 3, .days(7))))
        #expect(try await holds(f(.atMost, 3, .days(7))))
        #expect(try await !holds(f(.atMost, 2, .days(7))))
        #expect(try await holds(f(.exactly, 0, .last(seconds: 3_600))))
        #expect(try await holds(.all([f(.atLeast, 3, .days(7)), f(.exactly, 5, .ever)])))
        #expect(try await !holds(.all([f(.atLeast, 3, .days(7)), f(.exactly, 4, .ever)])))
        #expect(try await holds(.any([f(.atLeast, 9, .ever), f(.atMost, 5, .ever)])))
        #expect(try await !holds(.any([])))
        #expect(try await holds(.always))
        await engine.close()
    }

    @Test(
        "P1: the history survives a restart and the upload of its events, and is pruned by age", .needsChildProcesses)
    func historySurvivesRestartAndIsPruned() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        var configuration = EngineConfiguration.uploading(to: collector.url, in: directory.url)
        configuration.historyRetention = 30 * 86_400
        // An occurrence older than the retention, recorded 45 days ago (so
        // before everything below: history rows are pruned in recording order).
        let earlier = try DatabaseQueue(path: directory.defaultDataStoreURL.path)
        try earlier.sync { connection in
            try connection.withStatement("INSERT INTO event_history (name, recorded_at) VALUES ('purchase', ?)") {
                try $0.bind(Date().timeIntervalSince1970 - 45 * 86_400, at: 1)
                try $0.step()
            }
        }
        earlier.close()
        let first = EventEngine(configuration: configuration)
        try await first.start()
        #expect(
            try await first.surveys.evaluate(.eventFrequency(EventFrequency("purchase", .exactly, 0))),
            "pruned at start")
        for _ in 0..<3 { try first.record("purchase") }
        try await first.flush()
        #expect(try await first.query { try $0.countEvents(after: 0) } == 0, "uploaded and deleted from the log")
        await first.close()

        let second = EventEngine(configuration: configuration)
        try await second.start()
        #expect(
            try await second.surveys.evaluate(.eventFrequency(EventFrequency("purchase", .exactly, 3))),
            "kept across the restart; the 45-day-old one pruned")
        await second.close()
    }

    @Test("bad input: unknown survey ids, negative counts or windows, empty trigger lists")
    func badInput() async throws {
        let engine = try await startedEngine()
        #expect(throws: SpoolError.unknownSurvey("ghost")) { try engine.surveys.mark(.shown, "ghost") }
        #expect(try await engine.storedNames() == ["session_start"], "nothing recorded for an unknown survey")
        #expect(throws: SpoolError.invalidSurvey(.emptySurveyID)) { try engine.surveys.register(Survey(id: "")) }
        #expect(throws: SpoolError.invalidSurvey(.emptyTriggerList(surveyID: "s"))) {
            try engine.surveys.register(Survey(id: "s", triggerEventNames: []))
        }
        #expect(throws: SpoolError.invalidSurvey(.invalidCondition(surveyID: "s", reason: "negative count -1"))) {
            try engine.surveys.register(
                Survey(id: "s", conditions: .eventFrequency(EventFrequency("x", .atLeast, -1))))
        }
        expectInvalidSurvey {
            try engine.surveys.register(
                Survey(
                    id: "s",
                    conditions: .all([.eventFrequency(EventFrequency("x", .atMost, 1, in: .last(seconds: -5)))])))
        }
        #expect(engine.surveys.registered.isEmpty, "a refused survey is not half-registered")
        // Re-registering replaces; unregistering an unknown id is harmless.
        try engine.surveys.register(Survey(id: "s", triggerEventNames: ["a"]))
        try engine.surveys.register(Survey(id: "s", triggerEventNames: ["b"]))
        #expect(engine.surveys.registered.map(\.triggerEventNames) == [["b"]])
        engine.surveys.unregister("nope")
        await engine.close()
    }

    @Test("S3 at an event: a rule counts occurrences up to that event, also within one millisecond")
    func countsAtAnEventStopAtTheEvent() async throws {
        let triggers = TriggerLog()
        let engine = try await engine(triggers: triggers)
        try engine.surveys.register(
            Survey(
                id: "exactly", triggerEventNames: ["buy"],
                conditions: .eventFrequency(EventFrequency("buy", .exactly, 100))))
        try engine.surveys.register(
            Survey(
                id: "atLeast", triggerEventNames: ["buy"],
                conditions: .eventFrequency(EventFrequency("buy", .atLeast, 150))))
        // More names than the center follows at once (it forgets old ones).
        for index in 0..<1_100 { try engine.record("screen\(index)") }
        // A tight loop: many of these share a millisecond, and so a history
        // row that already counts the ones after each.
        for index in 0..<200 { try engine.record("buy", parameters: ["i": .int(index)]) }
        try await engine.settle()
        let fired = triggers.triggers.withLock { $0.map { ($0.surveyID, $0.event.parameters["i"]) } }
        #expect(fired.filter { $0.0 == "exactly" }.map(\.1) == [.int(99)], "the 100th, and only it")
        #expect(fired.filter { $0.0 == "atLeast" }.map(\.1) == (149..<200).map { .int($0) })
        #expect(try await engine.surveys.evaluate(.eventFrequency(EventFrequency("buy", .exactly, 200))))
        await engine.close()
    }

    @Test("S3 at an event: a survey registered in the middle of a burst counts from the first event on")
    func aSurveyRegisteredMidBurstCountsEverything() async throws {
        // Smaller under the thread sanitizer, whose slowdown would starve the
        // suite's time-bounded tests.
        let half = isThreadSanitized ? 500 : 2_000
        for _ in 0..<3 {
            let triggers = TriggerLog()
            let engine = try await engine(triggers: triggers)
            for index in 0..<(2 * half) {
                if index == half {
                    try engine.surveys.register(
                        Survey(
                            id: "exactly", triggerEventNames: ["y"],
                            conditions: .eventFrequency(EventFrequency("y", .exactly, half + 1))))
                }
                try engine.record("y", parameters: ["i": .int(index)])
            }
            try await engine.settle()
            let fired = triggers.triggers.withLock { $0.map { $0.event.parameters["i"] } }
            #expect(fired == [.int(half)], "the one at the registration, and only it")
            await engine.close()
        }
    }

    @Test("S3 at an event: with threads recording at once, the Nth is the Nth in log order")
    func concurrentRecordersCountInLogOrder() async throws {
        let triggers = TriggerLog()
        let engine = try await engine(triggers: triggers)
        let perThread = isThreadSanitized ? 500 : 2_000  // see aSurveyRegisteredMidBurstCountsEverything
        let total = 4 * perThread
        let counts = [1, 2, 3, 100, total / 8, total / 2, total - 1, total]
        for count in counts {
            try engine.surveys.register(
                Survey(
                    id: "exactly \(count)", triggerEventNames: ["x"],
                    conditions: .eventFrequency(EventFrequency("x", .exactly, count))))
        }
        try engine.surveys.register(
            Survey(
                id: "atMost 3", triggerEventNames: ["x"], conditions: .eventFrequency(EventFrequency("x", .atMost, 3))))
        try engine.surveys.register(Survey(id: "log order", triggerEventNames: ["x"]))
        // Each thread takes its timestamp before the append lock, so in log
        // order the times go back and forth.
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            for index in 0..<perThread {
                _ = try? engine.record("x", parameters: ["t": .int(thread), "i": .int(index)])
            }
        }
        try await engine.settle()
        let fired = triggers.triggers.withLock { $0 }
        let order = fired.filter { $0.surveyID == "log order" }.map(\.event.seq)
        try #require(order.count == total)
        func ordinals(_ id: String) -> [Int] {
            fired.filter { $0.surveyID == id }.compactMap { trigger in order.firstIndex(of: trigger.event.seq) }
                .map { $0 + 1 }
        }
        for count in counts { #expect(ordinals("exactly \(count)") == [count], "exactly \(count)") }
        #expect(ordinals("atMost 3") == [1, 2, 3])
        await engine.close()
    }

    @Test("S3 at an event: another writer of the file (an app extension) is counted in log order")
    func anotherWriterIsCountedInLogOrder() async throws {
        let directory = TemporaryDirectory()
        let triggers = TriggerLog()
        let engine = try await startedEngine(directory) { $0.maximumRetainedEvents = nil }
        engine.surveys.onTrigger { trigger in triggers.triggers.withLock { $0.append(trigger) } }
        // See aSurveyRegisteredMidBurstCountsEverything for the sizes.
        let (others, ours) = isThreadSanitized ? (600, 900) : (2_000, 3_000)
        let limits = [0, 1, 10, others / 20, others / 4, others / 2, others - 1]
        for limit in limits {
            try engine.surveys.register(
                Survey(
                    id: "atMost \(limit)", triggerEventNames: ["a"],
                    conditions: .eventFrequency(EventFrequency("other", .atMost, limit))))
        }
        // A second log on the same file, as an app extension's would be,
        // committing in small groups while the engine commits its own.
        let other = EventLog(database: try DatabaseQueue(path: directory.databaseURL.path))
        let extensionWriter = Task.detached {
            for index in 0..<others {
                try other.append(
                    EventRecord(
                        name: "other", parametersJSON: "{}", recordedAt: Date().timeIntervalSince1970,
                        addsToHistory: true))
                if index % 50 == 49 { try await other.waitUntilAllDurable() }
            }
        }
        for index in 0..<ours { try engine.record("a", parameters: ["i": .int(index)]) }
        try await extensionWriter.value
        await other.close()
        other.database.close()
        try await engine.settle()
        // The log's order is its positions, shared by both writers.
        let order = try await engine.query { connection in
            var order: [(seq: Int64, name: String)] = []
            try connection.withStatement("SELECT seq, name FROM events WHERE name IN ('a', 'other') ORDER BY seq") {
                while try $0.step() { order.append(($0.int64(at: 0), $0.string(at: 1))) }
            }
            return order
        }
        var othersBefore: [Int64: Int] = [:]
        var seen = 0
        for row in order {
            if row.name == "other" { seen += 1 } else { othersBefore[row.seq] = seen }
        }
        try #require(seen == others && othersBefore.count == ours)
        let fired = triggers.triggers.withLock { $0 }
        for limit in limits {
            let expected = Set(othersBefore.filter { $0.value <= limit }.keys)
            let got = Set(fired.filter { $0.surveyID == "atMost \(limit)" }.map(\.event.seq))
            #expect(
                got == expected,
                "atMost \(limit): \(got.subtracting(expected).count) extra, \(expected.subtracting(got).count) missing")
        }
        await engine.close()
    }

    @Test("L3, L6: a survey trigger goes with its event's delivery: not for excluded names, not while opted out")
    func triggersFollowTheDeliveryPolicy() async throws {
        let listener = CollectingListener()
        let triggers = TriggerLog()
        let engine = try await startedEngine(configure: { $0.excludedEventNames = ["hidden"] }) {
            $0.events.addObserver(listener)
        }
        engine.surveys.onTrigger { trigger in triggers.triggers.withLock { $0.append(trigger) } }
        try engine.surveys.register(Survey(id: "any"))
        try engine.record("hidden")
        for index in 0..<3_000 { try engine.record("shown", parameters: ["i": .int(index)]) }
        engine.setConsent(false)  // the rest is stored but no longer delivered
        try await engine.settle()
        let delivered = listener.names.filter { $0 == "shown" }.count
        let fired = triggers.triggers.withLock { $0.map(\.event.name) }
        #expect(!fired.contains("hidden"), "an excluded name triggers nothing")
        #expect(fired.count == delivered, "\(fired.count) triggers for \(delivered) events delivered")
        await engine.close()
    }

    @Test func triggersStreamEndsOnClose() async throws {
        let engine = try await startedEngine()
        try engine.surveys.register(Survey(id: "w"))
        let stream = engine.surveys.triggers()
        try engine.record("one")
        try engine.record("two")
        try await engine.settle()
        let collected = Task { await stream.reduce(into: [String]()) { $0.append($1.event.name) } }
        await engine.close()
        #expect(await collected.value == ["one", "two"])
    }
}
