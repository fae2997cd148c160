import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// S8–S12 (docs/BEHAVIOUR.md): session windows, sequences, the time since
/// the last occurrence, traits and stable sampling, on real SQLite files
/// with a clock the test moves.
struct SurveyConditionTests {
    typealias TriggerLog = SurveyTests.TriggerLog

    /// An engine on a temporary file whose clock only `clock.advance` moves,
    /// not started; its triggers go to `triggers`.
    static func engine(_ directory: TemporaryDirectory, clock: ManualClock, triggers: TriggerLog) -> EventEngine {
        var configuration = EngineConfiguration(database: .file(directory.databaseURL))
        configuration.clock = clock
        let engine = EventEngine(configuration: configuration)
        engine.surveys.onTrigger { trigger in triggers.triggers.withLock { $0.append(trigger) } }
        return engine
    }

    /// Records events numbered 1, 2, 3… in their `n` parameter, each after
    /// moving the clock, and waits until each is delivered.
    final class Recorder {
        let engine: EventEngine
        let clock: ManualClock
        private var n = 0

        init(engine: EventEngine, clock: ManualClock) {
            self.engine = engine
            self.clock = clock
        }

        func record(_ name: String, after seconds: Double, _ parameters: [String: EventValue] = [:]) async throws {
            clock.advance(by: seconds)
            n += 1
            try engine.record(name, parameters: parameters.merging(["n": .int(n)]) { $1 })
            try await engine.settle()
        }
    }

    /// The `n` parameter of each event that triggered `surveyID`.
    static func fired(_ triggers: TriggerLog, _ surveyID: String) -> [EventValue?] {
        triggers.triggers.withLock { $0.filter { $0.surveyID == surveyID }.map { $0.event.parameters["n"] } }
    }

    @Test("S8: thisSession counts from the session's first event, one recorded before start() too, and starts over")
    func thisSession() async throws {
        let (directory, clock, triggers) = (TemporaryDirectory(), ManualClock(), TriggerLog())
        let engine = Self.engine(directory, clock: clock, triggers: triggers)
        try engine.surveys.register(
            Survey(
                id: "twice", triggerEventNames: ["settings_opened"],
                conditions: .eventFrequency(EventFrequency("settings_opened", .atLeast, 2, in: .thisSession))))
        // Before start(): it waits in memory for the first session.
        try engine.record("settings_opened", parameters: ["n": 1])
        clock.advance(by: 5)
        try await engine.start()
        try engine.record("settings_opened", parameters: ["n": 2])
        try await engine.settle()
        #expect(Self.fired(triggers, "twice") == [2], "the one that waited for the session counts in it")
        clock.advance(by: 60)
        engine.startSession()
        clock.advance(by: 1)
        try engine.record("settings_opened", parameters: ["n": 3])
        try await engine.settle()
        #expect(Self.fired(triggers, "twice") == [2], "a new session counts from its start")
        try engine.record("settings_opened", parameters: ["n": 4])
        try await engine.settle()
        #expect(Self.fired(triggers, "twice") == [2, 4])
        let thisSession = SurveyCondition.eventFrequency(
            EventFrequency("settings_opened", .exactly, 2, in: .thisSession))
        #expect(try await engine.surveys.evaluate(thisSession))
        engine.endSession()
        #expect(
            try await engine.surveys.evaluate(
                .eventFrequency(EventFrequency("settings_opened", .exactly, 0, in: .thisSession))),
            "no session running: an empty window")
        await engine.close()
    }

    @Test("S9: A then B within a window; with an absence, only once its window has passed without C")
    func sequences() async throws {
        let (directory, clock, triggers) = (TemporaryDirectory(), ManualClock(), TriggerLog())
        let engine = Self.engine(directory, clock: clock, triggers: triggers)
        let cartThenLeft = EventSequence("cart_added", then: "checkout_left", within: .minutes(10), in: .minutes(30))
        try engine.surveys.register(
            Survey(id: "quick", triggerEventNames: ["checkout_left"], conditions: .sequence(cartThenLeft)))
        try engine.surveys.register(
            Survey(
                id: "abandoned", triggerEventNames: ["ping"],
                conditions: .sequence(cartThenLeft.notFollowed(by: "purchase", within: .minutes(10)))))
        try await engine.start()
        let recorder = Recorder(engine: engine, clock: clock)
        func record(_ name: String, after minutes: Double) async throws {
            try await recorder.record(name, after: minutes * 60)
        }
        try await record("cart_added", after: 0)  // 1, at 0 min
        try await record("checkout_left", after: 5)  // 2, at 5
        #expect(Self.fired(triggers, "quick") == [2])
        try await record("ping", after: 5)  // 3, at 10: the absence's window is still open
        try await record("ping", after: 6)  // 4, at 16: no purchase in the 10 minutes after 5
        #expect(Self.fired(triggers, "abandoned") == [4])
        let explanation = try #require(triggers.triggers.withLock { $0.last }).explanation
        #expect(
            explanation.verdict.observation == .sequenceMatched(at: Date(timeIntervalSince1970: clock.now - 11 * 60)))
        // Bought this time: no abandonment, and the first one is out of the 30-minute window.
        try await record("cart_added", after: 30)  // 5, at 46
        try await record("checkout_left", after: 1)  // 6, at 47
        try await record("purchase", after: 4)  // 7, at 51
        try await record("ping", after: 15)  // 8, at 66
        // Too slow: 15 minutes between cart and checkout.
        try await record("cart_added", after: 10)  // 9, at 76
        try await record("checkout_left", after: 15)  // 10, at 91
        try await record("ping", after: 15)  // 11, at 106
        #expect(Self.fired(triggers, "quick") == [2, 6])
        #expect(Self.fired(triggers, "abandoned") == [4])
        await engine.close()
    }

    @Test("S10: the time since the last occurrence, before the event evaluated at; never counts as long ago")
    func timeSinceLast() async throws {
        let (directory, clock, triggers) = (TemporaryDirectory(), ManualClock(), TriggerLog())
        let engine = Self.engine(directory, clock: clock, triggers: triggers)
        try engine.surveys.register(
            Survey(
                id: "returning", triggerEventNames: ["app_open"],
                conditions: .timeSinceLast(TimeSinceLast("app_open", .atLeast, 7 * 86_400))))
        try await engine.start()
        for (n, days) in [(1, 0.0), (2, 1), (3, 8), (4, 6.9), (5, 7)] {
            clock.advance(by: days * 86_400)
            try engine.record("app_open", parameters: ["n": .int(n)])
            try await engine.settle()
        }
        #expect(Self.fired(triggers, "returning") == [1, 3, 5], "never opened before, then 8 days, then 7")
        clock.advance(by: 90)
        #expect(try await engine.surveys.evaluate(.timeSinceLast(TimeSinceLast("app_open", .atMost, 90))))
        #expect(try await !engine.surveys.evaluate(.timeSinceLast(TimeSinceLast("app_open", .atMost, 89))))
        #expect(try await !engine.surveys.evaluate(.timeSinceLast(TimeSinceLast("never_seen", .atMost, 1e9))))
        await engine.close()
    }

    @Test("S11: a trait condition reads the identity in force, from memory, also while nothing reaches the file")
    func traits() async throws {
        let triggers = TriggerLog()
        let engine = try await startedEngine { $0.consent = false }
        engine.surveys.onTrigger { trigger in triggers.triggers.withLock { $0.append(trigger) } }
        try engine.surveys.register(
            Survey(id: "pro", triggerEventNames: ["x"], conditions: .trait("plan", .equals("pro"))))
        #expect(try await !engine.surveys.evaluate(.trait("plan", .exists)))
        // Without consent the traits stay in memory: the rule still sees them.
        try engine.identify(userId: "u1", traits: ["plan": "pro", "seats": 5])
        #expect(try await engine.surveys.evaluate(.trait("seats", .greaterThan(3))))
        let stored = try await engine.query { try $0.scalarString("SELECT group_concat(traits) FROM identities") }
        #expect(!stored.contains("pro"), "no trait reached the file")
        engine.setConsent(true)
        try engine.record("x", parameters: ["n": 1])
        // Evaluated when its group commits, with the identity in force then.
        try await engine.settle()
        try engine.identify(userId: "u1", traits: ["plan": "free"])
        try engine.record("x", parameters: ["n": 2])
        try await engine.settle()
        #expect(Self.fired(triggers, "pro") == [1])
        engine.reset()
        #expect(try await !engine.surveys.evaluate(.trait("plan", .exists)), "reset forgets the traits")
        await engine.close()
    }

    @Test("S7, S8, S9: the example rules of the README and the Surveys article register and trigger as they say")
    func documentedRules() async throws {
        let (directory, clock, triggers) = (TemporaryDirectory(), ManualClock(), TriggerLog())
        let engine = Self.engine(directory, clock: clock, triggers: triggers)
        // As written in the README's Surveys section.
        try engine.surveys.register(
            Survey(
                id: "loyal", triggerEventNames: ["app_open"],
                conditions: .eventFrequency(
                    EventFrequency(
                        "purchase", .atLeast, 3, in: .days(30), where: .property("amount", .greaterThan(50)))),
                historyProperties: ["purchase": ["amount"]]))
        try engine.surveys.register(
            Survey(
                id: "settings", triggerEventNames: ["settings_opened"],
                conditions: .eventFrequency(EventFrequency("settings_opened", .atLeast, 2, in: .thisSession))))
        try engine.surveys.register(
            Survey(
                id: "abandoned", triggerEventNames: ["app_open"],
                conditions: .sequence(
                    EventSequence("cart_added", then: "checkout_left", within: .minutes(10))
                        .notFollowed(by: "purchase", within: .minutes(10)))))
        try await engine.start()
        let recorder = Recorder(engine: engine, clock: clock)
        func record(_ name: String, _ parameters: [String: EventValue] = [:]) async throws {
            try await recorder.record(name, after: 60, parameters)
        }
        for amount in [60, 20, 70, 90] { try await record("purchase", ["amount": .int(amount)]) }  // 1–4
        try await record("settings_opened")  // 5
        try await record("settings_opened")  // 6
        try await record("cart_added")  // 7
        try await record("checkout_left")  // 8
        clock.advance(by: 10 * 60)
        try await record("app_open")  // 9
        #expect(Self.fired(triggers, "loyal") == [9])
        #expect(Self.fired(triggers, "settings") == [6])
        #expect(Self.fired(triggers, "abandoned") == [9])
        await engine.close()
    }

    @Test("S12: sampling is the documented hash: stable across launches, new after reset(), uniform, per survey")
    func sampling() async throws {
        // Values from an independent implementation of the documented hash.
        #expect(SampleBucket.of(anonymousID: "anon-1", surveyID: "nps") == 18.005286267750865)
        #expect(
            SampleBucket.of(anonymousID: "00000000-0000-4000-8000-000000000000", surveyID: "checkout")
                == 55.29312736240223)
        let ids = (0..<10_000).map { "user-\($0)" }
        let nps = ids.filter { SampleBucket.of(anonymousID: $0, surveyID: "nps") < 10 }
        let both = nps.filter { SampleBucket.of(anonymousID: $0, surveyID: "checkout") < 10 }
        #expect((900...1_100).contains(nps.count), "10% of users: \(nps.count)")
        #expect((50...150).contains(both.count), "each survey samples on its own: \(both.count) in both")

        let directory = TemporaryDirectory()
        func bucket(_ engine: EventEngine) async throws -> (Double, String) {
            try engine.surveys.register(Survey(id: "nps", conditions: .sampled(percent: 50)))
            let observation = try await engine.surveys.explain(surveyID: "nps").verdict.observation
            guard case .bucket(let bucket) = observation else {
                Issue.record("no bucket: \(observation)")
                return (-1, "")
            }
            return (bucket, try await engine.identity().anonymousId)
        }
        let first = try await startedEngine(directory)
        let (before, anonymousID) = try await bucket(first)
        #expect(before == SampleBucket.of(anonymousID: anonymousID, surveyID: "nps"))
        await first.close()
        let second = try await startedEngine(directory)
        #expect(try await bucket(second).0 == before, "the same user on the next launch")
        #expect(try await second.surveys.evaluate(.sampled(percent: 100)))
        #expect(try await !second.surveys.evaluate(.sampled(percent: 0)))
        second.reset()
        let (after, newID) = try await bucket(second)
        #expect(newID != anonymousID && after == SampleBucket.of(anonymousID: newID, surveyID: "nps"))
        #expect(after != before, "a new anonymous id draws again")
        await second.close()
    }
}
