import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// S13 and S14 (docs/BEHAVIOUR.md): `all`, `any` and `not` with their
/// explanations, at now and on a trigger, and the typed errors for bad
/// input.
struct SurveyExplanationTests {
    typealias TriggerLog = SurveyTests.TriggerLog

    @Test("S13: all, any and not combine; explain(surveyID:) gives each condition's value and verdict")
    func explanations() async throws {
        let triggers = TriggerLog()
        let engine = try await startedEngine()
        engine.surveys.onTrigger { trigger in triggers.triggers.withLock { $0.append(trigger) } }
        let conditions = SurveyCondition.all([
            .eventFrequency(
                EventFrequency("purchase", .atLeast, 2, in: .days(30), where: .property("amount", .greaterThan(50)))),
            .not(.trait("plan", .equals("free"))),
            .any([.sampled(percent: 100), .eventFrequency(EventFrequency("never", .atLeast, 1))]),
        ])
        try engine.surveys.register(
            Survey(
                id: "checkout", triggerEventNames: ["purchase"], conditions: conditions,
                historyProperties: ["purchase": ["amount"]]))
        try engine.identify(userId: "u1", traits: ["plan": "free"])
        for amount in [80, 90, 10] { try engine.record("purchase", parameters: ["amount": .int(amount)]) }
        try await engine.settle()
        #expect(triggers.surveyIDs.isEmpty, "a free plan: not shown")

        var explanation = try await engine.surveys.explain(surveyID: "checkout")
        #expect(!explanation.holds)
        let parts = explanation.verdict.parts
        #expect(parts.map(\.holds) == [true, false, true])
        #expect(parts[0].observation == .occurrences(2, orMore: false))
        #expect(parts[1].parts.first?.observation == .traitValue("free"))
        #expect(
            parts[2].parts.map(\.observation) == [.bucket(parts[2].parts[0].bucket), .occurrences(0, orMore: false)])
        #expect(parts[2].parts.map(\.holds) == [true, false], "explain evaluates every part")
        #expect(explanation.description.contains("✗ not"))
        #expect(explanation.description.contains("purchase where amount > 50.0, at least 2 in the last 30 days: 2"))

        try engine.identify(userId: "u1", traits: ["plan": "pro"])
        try engine.record("purchase", parameters: ["amount": 70])
        try await engine.settle()
        let trigger = try #require(triggers.triggers.withLock { $0.first })
        explanation = trigger.explanation
        #expect(explanation.holds && explanation.surveyID == "checkout")
        #expect(explanation.evaluatedAt == Date(timeIntervalSince1970: trigger.event.timestamp))
        #expect(explanation.verdict.parts[0].observation == .occurrences(3, orMore: true), "counted up to its cap")
        #expect(
            explanation.verdict.parts[2].parts.map(\.observation).last == .notEvaluated,
            "a trigger stops at the part that decided")
        await engine.close()
    }

    @Test("S14: bad input is a typed SpoolError.invalidSurvey and registers nothing")
    func badInput() async throws {
        let engine = try await startedEngine()
        func refused(_ conditions: SurveyCondition, declaring: [String: Set<String>] = [:]) throws {
            try engine.surveys.register(Survey(id: "s", conditions: conditions, historyProperties: declaring))
        }
        let filtered = { (match: ValueMatch) in
            SurveyCondition.eventFrequency(EventFrequency("purchase", .atLeast, 1, where: .property("amount", match)))
        }
        #expect(
            throws: SpoolError.invalidSurvey(
                .undeclaredProperty(surveyID: "s", eventName: "purchase", property: "amount"))
        ) {
            try refused(filtered(.exists), declaring: ["purchase": ["plan"], "refund": ["amount"]])
        }
        #expect(throws: SpoolError.invalidSurvey(.sequenceWithoutWindow(surveyID: "s"))) {
            try refused(.sequence(EventSequence("a", then: "b", within: .ever)))
        }
        #expect(throws: SpoolError.invalidSurvey(.sequenceWithoutWindow(surveyID: "s"))) {
            try refused(
                .sequence(EventSequence("a", then: "b", within: .minutes(1)).notFollowed(by: "c", within: .ever)))
        }
        for percent in [-1, 100.5, .nan, .infinity] {
            expectInvalidSurvey { try refused(.all([.sampled(percent: percent)])) }
            do {
                try refused(.sampled(percent: percent))
            } catch SpoolError.invalidSurvey(.samplingOutOfRange(let surveyID, _)) {
                #expect(surveyID == "s")
            }
        }
        #expect(throws: SpoolError.invalidSurvey(.nanComparisonValue(surveyID: "s", name: "amount"))) {
            try refused(filtered(.greaterThan(.nan)), declaring: ["purchase": ["amount"]])
        }
        #expect(throws: SpoolError.invalidSurvey(.nanComparisonValue(surveyID: "s", name: "amount"))) {
            try refused(filtered(.equals(.double(.nan))), declaring: ["purchase": ["amount"]])
        }
        #expect(throws: SpoolError.invalidSurvey(.nanComparisonValue(surveyID: "s", name: "score"))) {
            try refused(.not(.trait("score", .lessThan(.nan))))
        }
        #expect(
            throws: SpoolError.invalidSurvey(
                .invalidCondition(
                    surveyID: "s", reason: "amount is compared with a null, an array or an object"))
        ) {
            try refused(filtered(.equals(["a"])), declaring: ["purchase": ["amount"]])
        }
        expectInvalidSurvey { try refused(.sequence(EventSequence("a", then: "a", within: .minutes(1)))) }
        expectInvalidSurvey { try refused(.timeSinceLast(TimeSinceLast("a", .atLeast, -1))) }
        expectInvalidSurvey { try refused(.always, declaring: ["purchase": [""]]) }
        #expect(engine.surveys.registered.isEmpty, "a refused survey is not half-registered")
        // evaluate(_:) may filter on what a registered survey declares, nothing else.
        await #expect(
            throws: SpoolError.invalidSurvey(
                .undeclaredProperty(surveyID: "", eventName: "purchase", property: "amount"))
        ) {
            try await engine.surveys.evaluate(filtered(.exists))
        }
        try engine.surveys.register(Survey(id: "keeper", historyProperties: ["purchase": ["amount"]]))
        #expect(try await engine.surveys.evaluate(filtered(.exists)) == false)
        await #expect(throws: SpoolError.unknownSurvey("ghost")) {
            try await engine.surveys.explain(surveyID: "ghost")
        }
        #expect(
            SpoolError.invalidSurvey(.undeclaredProperty(surveyID: "s", eventName: "purchase", property: "amount"))
                .description
                .contains(#"historyProperties["purchase"]"#))
        await engine.close()
    }
}

extension ConditionVerdict {
    /// The bucket a sampling verdict measured (-1 for any other).
    fileprivate var bucket: Double {
        if case .bucket(let bucket) = observation { return bucket }
        return -1
    }
}
