import Foundation
import SpoolStorage

/// Surveys, their trigger rules, and the lifecycle events they emit; the
/// engine exposes it as ``EventEngine/surveys``.
///
/// Conditions are evaluated on Spool's database queue, inside the writer's
/// transaction for each commit group, after the group's rows and history are
/// written and before it commits: every registered survey for which an
/// event is a trigger candidate (its name is in `triggerEventNames`, or any
/// name for a wildcard survey — never a lifecycle event or the heartbeat) has
/// its conditions counted over the persisted history as it stands at that
/// event. No later group and no other process can commit in between. The
/// triggers found are reported afterwards on the delivery queue, after the
/// group's listeners, to ``onTrigger(_:)`` and ``triggers()``, in
/// registration order (an event delivery does not allow — opted out, an
/// excluded name — triggers nothing).
///
/// ```swift
/// try engine.surveys.register(Survey(id: "nps"))     // wildcard: any event
/// engine.surveys.onTrigger { trigger in
///     DispatchQueue.main.async { present(trigger.surveyID) }
/// }
/// try engine.surveys.mark(.shown, "nps")
/// ```
///
/// Registered surveys live in memory: register them again after each launch.
/// The event history they are evaluated over is in the database and
/// survives restarts.
public final class SurveyCenter: Sendable {
    struct State {
        /// By id. Ids and trigger names are compared by their bytes, as the
        /// history and the lifecycle events' `survey_id` keep them.
        var surveys: [Bytewise: (order: Int, survey: Survey)] = [:]
        var nextOrder = 0
        /// Candidates per trigger name (wildcards merged in), in registration
        /// order; rebuilt on every register/unregister so matching an event
        /// is one dictionary lookup.
        var byTrigger: [Bytewise: [Survey]] = [:]
        var wildcards: [Survey] = []
        /// Every registered survey's `historyProperties`, merged.
        var declared: [String: Set<String>] = [:]
        /// Raised whenever `declared` changes, so the engine keeps the last.
        var declaredVersion = 0

        /// Rebuilds the index and the declared properties; returns what the
        /// engine must keep when those changed.
        mutating func rebuild() -> (version: Int, properties: [String: Set<String>])? {
            let ordered = surveys.values.sorted { $0.order < $1.order }.map(\.survey)
            wildcards = ordered.filter { $0.triggerEventNames == nil }
            byTrigger = [:]
            for name in Set(ordered.flatMap { ($0.triggerEventNames ?? []).map(Bytewise.init) }) {
                byTrigger[name] = ordered.filter { $0.isCandidate(for: name.string) }
            }
            let merged = ordered.reduce(into: [String: Set<String>]()) { merged, survey in
                merged.merge(survey.historyProperties) { $0.union($1) }
            }
            guard merged != declared else { return nil }
            declared = merged
            declaredVersion += 1
            return (declaredVersion, merged)
        }
    }

    /// How the center reaches the engine it belongs to, without knowing it:
    /// how to record a lifecycle event, the database while one is open,
    /// which properties of recorded events to keep, the current session and
    /// identity.
    struct Context: Sendable {
        var record: @Sendable (_ name: String, _ parameters: [String: EventValue]) throws -> RecordOutcome
        var database: @Sendable () -> DatabaseQueue?
        var diagnostics: DiagnosticsCenter
        /// Keeps these properties of the events recorded from now on (a
        /// higher version replaces a lower one; never called under a lock).
        var keep: @Sendable (_ version: Int, _ properties: [String: Set<String>]) -> Void = { _, _ in }
        /// The current session's id, if one runs.
        var session: @Sendable () -> String? = { nil }
        /// The identity in force, from memory.
        var identity: @Sendable () -> (anonymousID: String?, traitsJSON: String) = { (nil, "{}") }
    }

    let state = Protected(State())
    let context: Context
    let triggerCallbacks = SubscriptionRegistry<TriggerTopic, SurveyTrigger>()

    /// Survey triggers have one topic.
    struct TriggerTopic: Hashable, Sendable {}

    init(context: Context) {
        self.context = context
    }

    // MARK: - Registering surveys

    /// Registers `survey`, replacing one with the same id.
    ///
    /// It takes part from the next commit group on; events already
    /// committed are not matched again. From the call on, the history keeps
    /// the values of its ``Survey/historyProperties`` of every event
    /// recorded, until it is unregistered.
    ///
    /// - Throws: ``SpoolError/invalidSurvey(_:)`` for an empty id, an empty trigger list (use
    ///   `nil` for a wildcard), a negative count or window, a filter on a
    ///   property the survey does not declare, a sequence without a window,
    ///   a sampling percentage outside 0 through 100, or a NaN to compare
    ///   with.
    public func register(_ survey: Survey) throws(SpoolError) {
        guard !survey.id.isEmpty else { throw .invalidSurvey(.emptySurveyID) }
        if let names = survey.triggerEventNames, names.isEmpty {
            throw .invalidSurvey(.emptyTriggerList(surveyID: survey.id))
        }
        if survey.historyProperties.contains(where: { $0.key.isEmpty || $0.value.contains("") }) {
            throw .invalidSurvey(
                .invalidCondition(surveyID: survey.id, reason: "historyProperties has an empty event or property name"))
        }
        try survey.conditions.validate(surveyID: survey.id, declared: survey.historyProperties)
        let kept = state.withLock { state in
            state.surveys[Bytewise(survey.id)] = (state.nextOrder, survey)
            state.nextOrder += 1
            return state.rebuild()
        }
        if let kept { context.keep(kept.version, kept.properties) }
    }

    /// Removes a survey; unknown ids are ignored. The property values only
    /// it declared are not kept for the events recorded after it.
    public func unregister(_ surveyID: String) {
        let kept = state.withLock { state in
            state.surveys.removeValue(forKey: Bytewise(surveyID)) != nil ? state.rebuild() : nil
        }
        if let kept { context.keep(kept.version, kept.properties) }
    }

    /// The registered surveys, in registration order.
    public var registered: [Survey] {
        state.withLock { $0.surveys.values.sorted { $0.order < $1.order }.map(\.survey) }
    }

    // MARK: - Lifecycle events

    /// Records one step of a registered survey's lifecycle: `.shown`,
    /// `.dismissed`, `.closed`, `.questionAnswered` or `.completed` (the
    /// events `survey_shown` … `survey_completed`), with a `survey_id`
    /// parameter that Spool sets.
    ///
    /// Recorded through `record`, like a custom event: the same gates and
    /// validation apply to `parameters`, and the returned outcome says
    /// whether it was stored. By convention `.questionAnswered` carries
    /// `question_id` and `answer`:
    ///
    /// ```swift
    /// try engine.surveys.mark(.shown, "nps")
    /// try engine.surveys.mark(.questionAnswered, "nps", parameters: ["question_id": "q1", "answer": 9])
    /// ```
    ///
    /// - Throws: ``SpoolError/unknownSurvey(_:)`` when `surveyID` is not
    ///   registered (nothing is recorded), and whatever
    ///   ``EventEngine/record(_:parameters:)`` throws.
    @discardableResult
    public func mark(
        _ step: SurveyLifecycleEvent, _ surveyID: String, parameters: [String: EventValue] = [:]
    ) throws -> RecordOutcome {
        guard state.withLock({ $0.surveys[Bytewise(surveyID)] != nil }) else {
            throw SpoolError.unknownSurvey(surveyID)
        }
        var parameters = parameters
        parameters["survey_id"] = .string(surveyID)
        return try context.record(step.rawValue, parameters)
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
    /// when it must count). A ``PropertyFilter`` may read the properties a
    /// registered survey declares; ``SurveyCondition/sampled(percent:)``
    /// hashes an empty survey id here.
    ///
    /// - Throws: ``SpoolError/invalidSurvey(_:)`` for a condition ``register(_:)`` would
    ///   refuse; ``SpoolError/notStarted`` before `start()`.
    public func evaluate(_ condition: SurveyCondition) async throws -> Bool {
        try condition.validate(surveyID: "", declared: state.withLock { $0.declared })
        guard let database = context.database() else { throw SpoolError.notStarted }
        let verdict = try await verdict(
            of: condition, surveyID: "", at: database.clock.now, exhaustive: false, in: database)
        return verdict.holds == true
    }

    /// What each of a registered survey's conditions measures now, and its
    /// verdict: why the survey would show, or not, at this moment.
    ///
    /// Every part of an `all` and `any` is evaluated (a trigger's explanation
    /// stops at the part that decided). Reads what is committed, like
    /// ``evaluate(_:)``.
    ///
    /// - Throws: ``SpoolError/unknownSurvey(_:)`` for an id that is not
    ///   registered; ``SpoolError/notStarted`` before `start()`;
    ///   ``SpoolError/sqlite(_:)`` when the database could not be read.
    public func explain(surveyID: String) async throws -> SurveyExplanation {
        guard let survey = state.withLock({ $0.surveys[Bytewise(surveyID)]?.survey }) else {
            throw SpoolError.unknownSurvey(surveyID)
        }
        guard let database = context.database() else { throw SpoolError.notStarted }
        let now = database.clock.now
        let verdict = try await verdict(
            of: survey.conditions, surveyID: survey.id, at: now, exhaustive: true, in: database)
        return SurveyExplanation(surveyID: survey.id, evaluatedAt: Date(timeIntervalSince1970: now), verdict: verdict)
    }

    /// `condition`'s verdict at `now` over what is committed.
    private func verdict(
        of condition: SurveyCondition, surveyID: String, at now: Double, exhaustive: Bool, in database: DatabaseQueue
    ) async throws -> ConditionVerdict {
        let sessionID = context.session()
        let identity = context.identity()
        return try await SpoolError.bridgingAsync {
            try await database.run { connection in
                let history = HistoryAsOf.now(
                    now, sessionID: sessionID,
                    identity: EvaluationIdentity(anonymousID: identity.anonymousID, traitsJSON: identity.traitsJSON),
                    in: connection)
                return try condition.verdict(over: history, surveyID: surveyID, exhaustive: exhaustive)
            }
        }
    }

    /// The surveys `name` makes candidates, in registration order.
    func candidates(for name: String) -> [Survey] {
        guard Survey.mayTrigger(name) else { return [] }
        return state.withLock { $0.byTrigger[Bytewise(name)] ?? $0.wildcards }
    }

    func finishAll() {
        triggerCallbacks.finishAll()
    }
}
