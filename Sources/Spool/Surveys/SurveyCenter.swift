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
    private let triggerCallbacks = SubscriptionRegistry<TriggerTopic, SurveyTrigger>()

    /// Survey triggers have one topic.
    private struct TriggerTopic: Hashable, Sendable {}

    init(context: Context) {
        self.context = context
    }

    // MARK: - Registering surveys

    /// Registers `survey`, replacing one with the same id.
    ///
    /// It takes part from the next commit group on; events already
    /// committed are not matched again.
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
        let now = database.clock.now
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

    /// Trigger candidacy and conditions for a group of events, inside the
    /// group's transaction after its rows are written (the engine's
    /// `EventLog.GroupReader`): each condition counts the history as the log
    /// stood at its event — what this group wrote, less the occurrences
    /// after the event in the group — and nothing else can commit
    /// meanwhile, not even another process. So "the Nth" is the Nth in log
    /// order, however events interleave. Each name and window start is
    /// counted once per group, however many events and surveys ask.
    func triggered(by events: [StoredEvent], in connection: Connection) -> [[Survey]]? {
        let candidates = events.map { self.candidates(for: $0.name) }
        guard candidates.contains(where: { !$0.isEmpty }) else { return nil }
        var triggered = candidates.map { $0.filter { $0.conditions == .always } }
        guard candidates.contains(where: { $0.contains { $0.conditions != .always } }) else { return triggered }
        do {
            let counts = GroupHistoryCounts(connection, events: events)
            // Backwards, counting what follows each event as we go.
            var later = LaterOccurrences(events)
            for index in events.indices.reversed() {
                if candidates[index].contains(where: { $0.conditions != .always }) {
                    let time = EvaluationTime.event(
                        at: events[index].recordedAt,
                        later: { name, since in later.count(of: name, since: since, after: index) },
                        count: counts.count)
                    triggered[index] = try candidates[index].filter {
                        try $0.conditions == .always || $0.conditions.holds(at: time, in: connection)
                    }
                }
                later.add(events[index])
            }
        } catch {
            // The events from the one whose conditions failed back to the
            // first trigger their unconditional surveys only; the events after
            // it, already checked, keep what they triggered.
            context.diagnostics.report(
                .surveyEvaluationFailed, eventCount: events.count, error: error,
                "survey conditions could not be evaluated")
        }
        return triggered
    }

    /// Fires the triggers ``triggered(by:in:)`` found, in log order (on the
    /// delivery queue, after the group's listeners).
    func follow(_ events: [StoredEvent], triggering surveys: [[Survey]]?, allowing allows: (String) -> Bool) {
        guard let surveys else { return }
        for (event, surveys) in zip(events, surveys) where !surveys.isEmpty && allows(event.name) {
            let recorded = RecordedEvent(event, parameters: event.deliveredParameters)
            for survey in surveys {
                triggerCallbacks.send(SurveyTrigger(surveyID: survey.id, event: recorded), to: TriggerTopic())
            }
        }
    }
}

/// History counts inside one group's transaction, where they cannot change:
/// each name and window start (to the millisecond) is counted once per rule
/// threshold, however many of the group's events ask.
private final class GroupHistoryCounts {
    private struct Key: Hashable {
        let name: String
        let since: Double?
    }

    private let connection: Connection
    private var known: [Key: (count: Int, cap: Int)] = [:]
    /// Each name's occurrences in the group: the most a rule's cap grows by
    /// from one event to another (it adds the occurrences after the event).
    private let inGroup: [String: Int]

    init(_ connection: Connection, events: [StoredEvent]) {
        self.connection = connection
        inGroup = events.reduce(into: [:]) { counts, event in
            if ReservedEventName.entersHistory(event.name) { counts[event.name, default: 0] += 1 }
        }
    }

    /// `Connection.historyCount(of:since:until:cap:)` through the end of the
    /// log.
    func count(of name: String, since: Double?, cap: Int) throws -> Int {
        let key = Key(name: name, since: since.map(HistoryMillisecond.of))
        // A count below its cap is exact; one at its cap answers any smaller cap.
        if let known = known[key], known.count < known.cap || cap <= known.cap { return min(known.count, cap) }
        // Count far enough for every event of the group at once: counting
        // each event's cap anew would scan the history once per event
        // (seconds per group for a rule on a name with a long history).
        let extra = inGroup[name, default: 0]
        let asked = cap > Int.max - extra ? Int.max : cap + extra
        let count = try connection.historyCount(of: name, since: since, until: nil, cap: asked)
        known[key] = (count, asked)
        return min(count, cap)
    }
}

/// Occurrences after an event in its commit group, per name: what the
/// history already counts but the event must not.
private struct LaterOccurrences {
    let events: [StoredEvent]
    private var counts: [String: Int] = [:]
    /// The earliest millisecond among the counted events.
    private var earliest = Double.infinity

    init(_ events: [StoredEvent]) {
        self.events = events
    }

    /// Counts `event`, which comes before every event counted so far.
    mutating func add(_ event: StoredEvent) {
        guard ReservedEventName.entersHistory(event.name) else { return }
        counts[event.name, default: 0] += 1
        earliest = min(earliest, HistoryMillisecond.of(event.recordedAt))
    }

    /// How many of `name` follow the event at `index` from the millisecond
    /// of `since` on (nil: all of them), as the history counts them.
    func count(of name: String, since: Double?, after index: Int) -> Int {
        guard let since, HistoryMillisecond.of(since) > earliest else { return counts[name, default: 0] }
        // A later event older than the window (a clock set back): count exactly.
        let first = HistoryMillisecond.of(since)
        return events[(index + 1)...].reduce(0) { total, event in
            ReservedEventName.entersHistory(event.name) && event.name == name
                && HistoryMillisecond.of(event.recordedAt) >= first ? total + 1 : total
        }
    }
}
