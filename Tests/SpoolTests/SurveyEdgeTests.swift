import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Survey rules at the edges: sessions that start while events are being
/// recorded, strings whose bytes differ though Swift compares them equal,
/// integers past a double's precision, dates that cannot be recorded, and a
/// clock set back.
struct SurveyEdgeTests {
    typealias TriggerLog = SurveyTests.TriggerLog

    /// A clock whose wall time moves on a millisecond at every read, so
    /// that two reads are never the same time.
    final class TickingClock: SpoolClock {
        private let base = ManualClock()
        private let reads = Protected(0.0)

        var now: Double {
            base.now
                + reads.withLock { reads in
                    reads += 0.001
                    return reads
                }
        }
        var monotonic: Double? { base.monotonic }

        func schedule(after delay: TimeInterval, on queue: DispatchQueue, _ body: @escaping @Sendable () -> Void) {
            base.schedule(after: delay, on: queue, body)
        }
    }

    @Test(
        "S8: sessions started while threads record: every event's time is at or after its session's start, so thisSession counts it"
    )
    func eventsNeverPrecedeTheirSession() async throws {
        let directory = TemporaryDirectory()
        var configuration = EngineConfiguration(database: .file(directory.databaseURL))
        configuration.clock = TickingClock()
        let engine = EventEngine(configuration: configuration)
        let delivered = Protected<[RecordedEvent]>([])
        engine.on(.everyEvent) { event in delivered.withLock { $0.append(event) } }
        try await engine.start()
        let (threads, perThread) = (4, 1_500)
        await withTaskGroup(of: Void.self) { group in
            for thread in 0..<threads {
                group.addTask {
                    for index in 0..<perThread {
                        _ = try? engine.record("tap", parameters: ["t": .int(thread), "i": .int(index)])
                    }
                }
            }
            group.addTask {
                for _ in 0..<300 { engine.startSession() }
            }
        }
        try await engine.settle()
        let events = delivered.withLock { $0 }
        #expect(events.count { $0.name == "tap" } == threads * perThread)
        let early = events.filter { event in
            guard let session = event.sessionID, let start = EventID.milliseconds(of: session) else { return true }
            return EventID.milliseconds(since1970: event.timestamp) < start
        }
        #expect(
            early.count == 0,
            "\(early.count) events before their session began, e.g. \(early.prefix(2).map { ($0.timestamp, $0.sessionID ?? "") })"
        )
        await engine.close()
    }

    @Test("S7: evaluate() and explain() count every committed event, also after the clock was set back")
    func countsAfterTheClockIsSetBack() async throws {
        let (directory, clock, triggers) = (TemporaryDirectory(), ManualClock(), TriggerLog())
        let engine = SurveyConditionTests.engine(directory, clock: clock, triggers: triggers)
        try await engine.start()
        for _ in 0..<3 {
            clock.advance(by: 1)
            _ = try await engine.recordDurably("purchase")
        }
        let atLeast3 = SurveyCondition.eventFrequency(EventFrequency("purchase", .atLeast, 3))
        #expect(try await engine.surveys.evaluate(atLeast3))
        clock.setWall(to: clock.now - 3_600)
        try engine.surveys.register(Survey(id: "loyal", triggerEventNames: ["app_open"], conditions: atLeast3))
        try engine.record("app_open")
        try await engine.settle()
        #expect(triggers.surveyIDs == ["loyal"], "the rule held at the event")
        #expect(try await engine.surveys.evaluate(atLeast3), "and holds at now")
        let explanation = try await engine.surveys.explain(surveyID: "loyal")
        #expect(explanation.holds, "\(explanation)")
        await engine.close()
    }

    @Test(
        "S14: a date to compare with that no event can carry is refused at registration and at evaluate(), never moved")
    func unrepresentableDateOperand() async throws {
        let engine = try await startedEngine()
        let absurd = Date(timeIntervalSince1970: 1e15)
        #expect(throws: SpoolError.self) { try engine.record("x", parameters: ["d": .date(absurd)]) }
        for date in [absurd, Date(timeIntervalSince1970: .nan), Date(timeIntervalSince1970: -1e13)] {
            expectInvalidSurvey {
                try engine.surveys.register(Survey(id: "absurd", conditions: .trait("renewal", .equals(.date(date)))))
            }
            expectInvalidSurvey {
                try engine.surveys.register(
                    Survey(id: "absurd", conditions: .trait("renewal", .notEquals(.date(date)))))
            }
        }
        // The latest date an event can carry is compared as it is.
        try engine.identify(userId: "u", traits: ["renewal": .date(EventValue.latestDate)])
        await #expect(throws: SpoolError.self) {
            _ = try await engine.surveys.evaluate(.trait("renewal", .equals(.date(absurd))))
        }
        #expect(try await engine.surveys.evaluate(.trait("renewal", .equals(.date(EventValue.latestDate)))))
        await engine.close()
    }

    /// "café" spelt with one scalar (NFC) and with a combining accent
    /// (NFD): Swift's `==` takes them as one string, their bytes differ.
    static let (nfc, nfd) = ("caf\u{E9}", "cafe\u{301}")

    /// The smallest `n` for which "exactly n" holds at now (-1: none up to 10).
    static func count(_ engine: EventEngine, _ name: String, where filter: PropertyFilter? = nil) async throws -> Int {
        for n in 0...10
        where try await engine.surveys.evaluate(.eventFrequency(EventFrequency(name, .exactly, n, where: filter))) {
            return n
        }
        return -1
    }

    @Test(
        "S7: two spellings of a name are counted apart, in one millisecond too, and a trigger name matches its own bytes only",
        arguments: [0.0, 0.01])
    func namesByTheirBytes(gap: Double) async throws {
        let (directory, clock, triggers) = (TemporaryDirectory(), ManualClock(), TriggerLog())
        let engine = SurveyConditionTests.engine(directory, clock: clock, triggers: triggers)
        try await engine.start()
        try engine.record(Self.nfc, parameters: ["n": 1])
        clock.advance(by: gap)
        try engine.record(Self.nfd, parameters: ["n": 2])
        try await engine.settle()
        #expect(try await Self.count(engine, Self.nfc) == 1)
        #expect(try await Self.count(engine, Self.nfd) == 1)
        // A trigger name matches its own spelling (each event in a commit of its own).
        try engine.surveys.register(
            Survey(
                id: "counted", triggerEventNames: [Self.nfc],
                conditions: .eventFrequency(EventFrequency(Self.nfc, .exactly, 2))))
        _ = try await engine.recordDurably(Self.nfd, parameters: ["n": 3])
        _ = try await engine.recordDurably(Self.nfc, parameters: ["n": 4])
        try await engine.settle()
        #expect(SurveyConditionTests.fired(triggers, "counted") == [4], "only the NFC event is a candidate")
        await engine.close()
    }

    @Test("S7: two spellings of a kept value are kept apart, in one millisecond too", arguments: [0.0, 0.01])
    func valuesByTheirBytes(gap: Double) async throws {
        let (directory, clock, triggers) = (TemporaryDirectory(), ManualClock(), TriggerLog())
        let engine = SurveyConditionTests.engine(directory, clock: clock, triggers: triggers)
        let place = PropertyFilter.property("place", .equals(.string(Self.nfc)))
        try engine.surveys.register(
            Survey(
                id: "first-nfc", triggerEventNames: ["visit"],
                conditions: .eventFrequency(EventFrequency("visit", .exactly, 1, where: place)),
                historyProperties: ["visit": ["place"]]))
        try await engine.start()
        try engine.record("visit", parameters: ["place": .string(Self.nfc), "n": 1])
        clock.advance(by: gap)
        try engine.record("visit", parameters: ["place": .string(Self.nfd), "n": 2])
        try await engine.settle()
        #expect(try await Self.count(engine, "visit", where: place) == 1)
        #expect(try await Self.count(engine, "visit", where: .property("place", .equals(.string(Self.nfd)))) == 1)
        #expect(SurveyConditionTests.fired(triggers, "first-nfc") == [1, 2], "one NFC visit at each event")
        await engine.close()
    }

    @Test("S1: a survey id is its bytes: another spelling is not registered, and survey_id carries the registered one")
    func surveyIDsByTheirBytes() async throws {
        let listener = CollectingListener()
        let engine = try await startedEngine(before: { $0.events.addObserver(listener) })
        try engine.surveys.register(Survey(id: Self.nfc))
        #expect(throws: SpoolError.unknownSurvey(Self.nfd)) { try engine.surveys.mark(.shown, Self.nfd) }
        await #expect(throws: SpoolError.unknownSurvey(Self.nfd)) {
            try await engine.surveys.explain(surveyID: Self.nfd)
        }
        try engine.surveys.mark(.shown, Self.nfc)
        try await engine.settle()
        let ids = listener.received.withLock { $0.filter { $0.name == "survey_shown" } }
            .map { Array(($0.parameters["survey_id"]?.stringValue ?? "").utf8) }
        #expect(ids == [Array(Self.nfc.utf8)])
        // Registering the other spelling adds a survey; it replaces none.
        try engine.surveys.register(Survey(id: Self.nfd))
        #expect(engine.surveys.registered.count == 2)
        await engine.close()
    }

    @Test("S7, S11: greaterThan and lessThan compare integers past 2^53 by their value, in filters and traits")
    func bigIntegersCompareByValue() async throws {
        let engine = try await startedEngine()
        try engine.identify(userId: "u", traits: ["id": .int(9_007_199_254_740_993)])
        #expect(try await engine.surveys.evaluate(.trait("id", .greaterThan(9_007_199_254_740_992))))
        #expect(!(try await engine.surveys.evaluate(.trait("id", .lessThan(9_007_199_254_740_992)))))
        #expect(try await engine.surveys.evaluate(.trait("id", .lessThan(9_007_199_254_740_994))))
        try engine.surveys.register(
            Survey(id: "keeper", triggerEventNames: ["never"], historyProperties: ["purchase": ["amount"]]))
        for amount in [9_007_199_254_740_993, 9_007_199_254_740_995, Int(Int64.max)] {
            _ = try await engine.recordDurably("purchase", parameters: ["amount": .int(amount)])
        }
        func count(_ match: ValueMatch) async throws -> Int {
            try await Self.count(engine, "purchase", where: .property("amount", match))
        }
        #expect(try await count(.greaterThan(9_007_199_254_740_992)) == 3)
        #expect(try await count(.lessThan(9_007_199_254_740_996)) == 2)
        #expect(try await count(.lessThan(9_007_199_254_740_994)) == 1)
        #expect(try await count(.greaterThan(0x1p63)) == 0)
        #expect(try await count(.lessThan(0x1p63)) == 3)
        #expect(try await count(.greaterThan(0x1p63 - 1024)) == 1)
        await engine.close()
    }
}
