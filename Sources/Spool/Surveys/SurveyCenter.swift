import Foundation
import SpoolStorage

/// Surveys, their trigger rules, and the lifecycle events they emit; the
/// engine exposes it as ``EventEngine/surveys``.
///
/// After each committed event, on the delivery queue: every registered survey
/// for which the event is a trigger candidate (its name is in
/// `triggerEventNames`, or any name for a wildcard survey — never a lifecycle
/// event or the heartbeat) has its conditions evaluated over the persisted
/// history, and each one that holds is reported to ``onTrigger(_:)`` and
/// ``triggers()``, in registration order.
///
/// ```swift
/// try engine.surveys.register(Survey(id: "nps"))     // wildcard: any event
/// engine.surveys.onTrigger { trigger in
///     DispatchQueue.main.async { present(trigger.surveyID) }
/// }
/// try engine.surveys.markShown("nps")
/// ```
///
/// Registered surveys live in memory: register them again after each launch.
/// The event history they are evaluated over is in the database and
/// survives restarts.
public final class SurveyCenter: Sendable {
    private struct State {
        var surveys: [String: (order: Int, survey: Survey)] = [:]
        var nextOrder = 0
        /// Candidates per trigger name (wildcards merged in), in registration
        /// order; rebuilt on every register/unregister so matching an event
        /// is one dictionary lookup.
        var byTrigger: [String: [Survey]] = [:]
        var wildcards: [Survey] = []

        mutating func rebuildIndex() {
            let ordered = surveys.values.sorted { $0.order < $1.order }.map(\.survey)
            wildcards = ordered.filter { $0.triggerEventNames == nil }
            byTrigger = [:]
            for name in Set(ordered.flatMap { $0.triggerEventNames ?? [] }) {
                byTrigger[name] = ordered.filter { $0.isCandidate(for: name) }
            }
        }
    }

    /// How the center reaches the engine it belongs to, without knowing it:
    /// how to record a lifecycle event, and the database while one is open.
    struct Context: Sendable {
        var record: @Sendable (_ name: String, _ parameters: [String: EventValue]) throws -> RecordOutcome
        var database: @Sendable () -> DatabaseQueue?
        var diagnostics: DiagnosticsCenter
    }

    private let state = Protected(State())
    private let context: Context
    /// Per event name, the last millisecond delivered and how many of its
    /// occurrences were delivered in it so far (only touched by ``follow(_:)``
    /// on the delivery queue; locked to be `Sendable`).
    private let lastMillisecond = Protected([String: (millisecond: Double, occurrences: Int)]())
    private let triggerCallbacks = SubscriptionRegistry<TriggerTopic, SurveyTrigger>()

    /// Survey triggers have one topic.
    private struct TriggerTopic: Hashable, Sendable {}

    init(context: Context) {
        self.context = context
    }

    // MARK: - Registering surveys

    /// Registers `survey`, replacing one with the same id.
    ///
    /// It takes part from the next delivered event on; events already
    /// delivered are not matched again.
    ///
    /// - Throws: ``SurveyError`` for an empty id, an empty trigger list (use
    ///   `nil` for a wildcard), a negative count or window.
    public func register(_ survey: Survey) throws(SurveyError) {
        guard !survey.id.isEmpty else { throw .emptySurveyID }
        if let names = survey.triggerEventNames, names.isEmpty { throw .emptyTriggerList(surveyID: survey.id) }
        try survey.conditions.validate(surveyID: survey.id)
        state.withLock { state in
            state.surveys[survey.id] = (state.nextOrder, survey)
            state.nextOrder += 1
            state.rebuildIndex()
        }
    }

    /// Removes a survey; unknown ids are ignored.
    public func unregister(_ surveyID: String) {
        state.withLock { state in
            guard state.surveys.removeValue(forKey: surveyID) != nil else { return }
            state.rebuildIndex()
        }
    }

    /// The registered surveys, in registration order.
    public var registered: [Survey] {
        state.withLock { $0.surveys.values.sorted { $0.order < $1.order }.map(\.survey) }
    }

    // MARK: - Lifecycle events

    /// Records `survey_shown` for a registered survey.
    ///
    /// Recorded through `record`, like a custom event: the same gates apply,
    /// and the returned outcome says whether it was stored.
    ///
    /// - Throws: ``SurveyError/unknownSurvey(_:)`` when `surveyID` is not
    ///   registered (nothing is recorded), and whatever
    ///   ``EventEngine/record(_:parameters:)`` throws.
    @discardableResult
    public func markShown(_ surveyID: String) throws -> RecordOutcome {
        try recordLifecycle(.shown, surveyID)
    }

    /// Records `survey_dismissed` for a registered survey.
    ///
    /// Recorded through `record`, like a custom event: the same gates apply,
    /// and the returned outcome says whether it was stored.
    ///
    /// - Throws: ``SurveyError/unknownSurvey(_:)`` when `surveyID` is not
    ///   registered (nothing is recorded), and whatever
    ///   ``EventEngine/record(_:parameters:)`` throws.
    @discardableResult
    public func markDismissed(_ surveyID: String) throws -> RecordOutcome {
        try recordLifecycle(.dismissed, surveyID)
    }

    /// Records `survey_closed` for a registered survey.
    ///
    /// Recorded through `record`, like a custom event: the same gates apply,
    /// and the returned outcome says whether it was stored.
    ///
    /// - Throws: ``SurveyError/unknownSurvey(_:)`` when `surveyID` is not
    ///   registered (nothing is recorded), and whatever
    ///   ``EventEngine/record(_:parameters:)`` throws.
    @discardableResult
    public func markClosed(_ surveyID: String) throws -> RecordOutcome {
        try recordLifecycle(.closed, surveyID)
    }

    /// Records `survey_question_answered` for a registered survey, with the
    /// parameters `question_id` and `answer`.
    ///
    /// Recorded through `record`, like a custom event: the same gates apply,
    /// and the returned outcome says whether it was stored.
    ///
    /// - Throws: ``SurveyError/unknownSurvey(_:)`` when `surveyID` is not
    ///   registered (nothing is recorded), and whatever
    ///   ``EventEngine/record(_:parameters:)`` throws.
    @discardableResult
    public func markQuestionAnswered(_ surveyID: String, questionID: String, answer: EventValue) throws -> RecordOutcome
    {
        try recordLifecycle(.questionAnswered, surveyID, ["question_id": .string(questionID), "answer": answer])
    }

    /// Records `survey_completed` for a registered survey.
    ///
    /// Recorded through `record`, like a custom event: the same gates apply,
    /// and the returned outcome says whether it was stored.
    ///
    /// - Throws: ``SurveyError/unknownSurvey(_:)`` when `surveyID` is not
    ///   registered (nothing is recorded), and whatever
    ///   ``EventEngine/record(_:parameters:)`` throws.
    @discardableResult
    public func markCompleted(_ surveyID: String) throws -> RecordOutcome {
        try recordLifecycle(.completed, surveyID)
    }

    /// Lifecycle events go through `record` like any custom event: gates,
    /// storage, listeners, upload and history.
    ///
    /// - Throws: ``SurveyError/unknownSurvey(_:)`` for an id that is not
    ///   registered (nothing is recorded), and whatever `record` throws.
    private func recordLifecycle(
        _ event: SurveyLifecycleEvent, _ surveyID: String, _ extra: [String: EventValue] = [:]
    ) throws -> RecordOutcome {
        guard state.withLock({ $0.surveys[surveyID] != nil }) else { throw SurveyError.unknownSurvey(surveyID) }
        var parameters = extra
        parameters["survey_id"] = .string(surveyID)
        return try context.record(event.eventName, parameters)
    }

    // MARK: - Triggers

    /// Calls `callback` on the delivery queue for every survey that a
    /// recorded event triggered, until the registration is cancelled.
    ///
    /// One event can trigger several surveys: the callback is called once per
    /// survey, in registration order. Return quickly; the delivery queue
    /// also calls every listener.
    @discardableResult
    public func onTrigger(_ callback: @escaping @Sendable (SurveyTrigger) -> Void) -> Registration {
        triggerCallbacks.add(TriggerTopic(), callback)
    }

    /// The same triggers as an `AsyncSequence`; it ends when the engine closes.
    public func triggers() -> AsyncStream<SurveyTrigger> {
        triggerCallbacks.stream(TriggerTopic())
    }

    /// Whether `condition` holds now over the persisted history.
    ///
    /// Counts events committed so far; an event just recorded may not be
    /// committed yet (use ``EventEngine/recordDurably(_:parameters:)`` first
    /// when it must count).
    ///
    /// - Throws: ``SurveyError/invalidCondition(surveyID:reason:)`` for a
    ///   negative count or window; ``SpoolError/notStarted`` before `start()`.
    public func evaluate(_ condition: SurveyCondition) async throws -> Bool {
        try condition.validate(surveyID: "")
        guard let database = context.database() else { throw SpoolError.notStarted }
        let now = Date().timeIntervalSince1970
        return try await SpoolError.bridgingAsync {
            try await database.run { try condition.holds(at: .now(now), in: $0) }
        }
    }

    /// The surveys `name` makes candidates, in registration order.
    func candidates(for name: String) -> [Survey] {
        guard Survey.mayTrigger(name) else { return [] }
        return state.withLock { $0.byTrigger[name] ?? $0.wildcards }
    }

    func finishAll() {
        triggerCallbacks.finishAll()
    }
}

// MARK: - Following delivery

extension SurveyCenter: DeliveryFollower {
    /// True when some survey could be triggered, so delivery must consult us.
    var isActive: Bool {
        state.withLock { !$0.surveys.isEmpty }
    }

    /// Trigger candidacy and conditions for a group of committed events, in
    /// log order (on the delivery queue). Conditions are evaluated for the
    /// whole group in one trip to the database, each at its event's time.
    func follow(_ events: [StoredEvent]) {
        let candidates = events.map { self.candidates(for: $0.name) }
        let sameMillisecond = occurrencesInMillisecond(events, where: candidates)
        guard candidates.contains(where: { !$0.isEmpty }) else { return }
        var verdicts: [[Bool]] = candidates.map { $0.map { $0.conditions == .always } }
        if candidates.contains(where: { $0.contains { $0.conditions != .always } }), let database = context.database() {
            let times = events.indices.map {
                EvaluationTime.event(at: events[$0].recordedAt, sameMillisecond: sameMillisecond[$0])
            }
            do {
                verdicts = try database.sync { connection in
                    try zip(candidates, times).map { surveys, time in
                        try surveys.map {
                            try $0.conditions == .always || $0.conditions.holds(at: time, in: connection)
                        }
                    }
                }
            } catch {
                // No condition could be checked: only unconditional surveys trigger.
                context.diagnostics.report(
                    .surveyEvaluationFailed, eventCount: events.count, error: error,
                    "survey conditions could not be evaluated")
            }
        }
        for (index, event) in events.enumerated() where verdicts[index].contains(true) {
            let recorded = RecordedEvent(event, parameters: event.deliveredParameters)
            for (survey, holds) in zip(candidates[index], verdicts[index]) where holds {
                triggerCallbacks.send(SurveyTrigger(surveyID: survey.id, event: recorded), to: TriggerTopic())
            }
        }
    }
}

extension SurveyCenter {
    /// For each event with candidates, how many times each name its
    /// candidates' conditions count occurred in the event's millisecond up
    /// to and including it (the history's row for that millisecond may
    /// already count later ones). Follows every delivered event, in log
    /// order; an occurrence delivered before any survey was registered, or
    /// recorded by another process, is not seen here and so is not counted
    /// within its own millisecond.
    fileprivate func occurrencesInMillisecond(
        _ events: [StoredEvent], where candidates: [[Survey]]
    ) -> [[String: Int]] {
        lastMillisecond.withLock { last in
            events.indices.map { index in
                let event = events[index]
                let millisecond = HistoryMillisecond.of(event.recordedAt)
                if ReservedEventName.entersHistory(event.name) {
                    let seen = last[event.name]
                    if let seen, seen.millisecond == millisecond {
                        last[event.name] = (millisecond, seen.occurrences + 1)
                    } else if seen.map({ $0.millisecond < millisecond }) ?? true {
                        last[event.name] = (millisecond, 1)
                        // Names come and go (a name per screen): forget those
                        // not seen for a second; past 1,024 names in a second,
                        // all but this one (a name is only needed within its
                        // millisecond, so little is lost, and each filter pass
                        // then pays for a thousand appends).
                        if last.count > 1_024 {
                            last = last.filter { $0.value.millisecond >= millisecond - 1 }
                            if last.count > 1_024 { last = [event.name: (millisecond, 1)] }
                        }
                    }
                }
                guard candidates[index].contains(where: { $0.conditions != .always }) else { return [:] }
                var counts: [String: Int] = [:]
                for survey in candidates[index] {
                    for name in survey.conditions.countedEventNames {
                        if let seen = last[name], seen.millisecond == millisecond { counts[name] = seen.occurrences }
                    }
                }
                return counts
            }
        }
    }
}
