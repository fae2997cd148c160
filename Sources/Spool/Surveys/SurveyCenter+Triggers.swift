import Foundation
import SpoolStorage

/// A survey an event triggered, with why.
package struct SurveyMatch: Sendable {
    let surveyID: String
    let explanation: SurveyExplanation
}

// MARK: - Following delivery

extension SurveyCenter: DeliveryFollower {
    /// True when some survey could be triggered, so delivery must consult us.
    var isActive: Bool {
        state.withLock { !$0.surveys.isEmpty }
    }

    /// Trigger candidacy and conditions for a group of events, inside the
    /// group's transaction after its rows are written (the engine's
    /// `EventLog.GroupReader`): each condition reads the history as the log
    /// stood at its event — what this group wrote, less the occurrences
    /// after the event in the group — and nothing else can commit
    /// meanwhile, not even another process. So "the Nth" is the Nth in log
    /// order, however events interleave. Each name, filter and window start
    /// is counted once per group, however many events and surveys ask.
    func triggered(by events: [StoredEvent], in connection: Connection) -> [[SurveyMatch]]? {
        let candidates = events.map { self.candidates(for: $0.name) }
        guard candidates.contains(where: { !$0.isEmpty }) else { return nil }
        var triggered = events.indices.map { index in
            candidates[index].filter { $0.conditions == .always }.map {
                SurveyMatch(surveyID: $0.id, explanation: Self.always($0.id, at: events[index].recordedAt))
            }
        }
        guard candidates.contains(where: { $0.contains { $0.conditions != .always } }) else { return triggered }
        do {
            let counts = GroupHistoryCounts(connection, events: events)
            let identity = context.identity()
            let evaluationIdentity = EvaluationIdentity(
                anonymousID: identity.anonymousID, traitsJSON: identity.traitsJSON)
            let sessions = SessionStarts()
            // Backwards, counting what follows each event as we go.
            let later = LaterOccurrences(events)
            for index in events.indices.reversed() {
                let event = events[index]
                if candidates[index].contains(where: { $0.conditions != .always }) {
                    let history = HistoryAsOf.event(
                        event, sessions: sessions, identity: evaluationIdentity, counts: counts, later: later,
                        in: connection)
                    let at = Date(timeIntervalSince1970: event.recordedAt)
                    triggered[index] = try candidates[index].compactMap { survey in
                        let verdict = try survey.conditions.verdict(
                            over: history, surveyID: survey.id, exhaustive: false)
                        guard verdict.holds == true else { return nil }
                        return SurveyMatch(
                            surveyID: survey.id,
                            explanation: SurveyExplanation(surveyID: survey.id, evaluatedAt: at, verdict: verdict))
                    }
                }
                later.addCurrent()
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

    /// The explanation of a survey without conditions.
    private static func always(_ surveyID: String, at time: Double) -> SurveyExplanation {
        SurveyExplanation(
            surveyID: surveyID, evaluatedAt: Date(timeIntervalSince1970: time),
            verdict: ConditionVerdict(.always, .combined, holds: true))
    }

    /// Fires the triggers ``triggered(by:in:)`` found, in log order (on the
    /// delivery queue, after the group's listeners).
    func follow(_ events: [StoredEvent], triggering matches: [[SurveyMatch]]?, allowing allows: (String) -> Bool) {
        guard let matches else { return }
        for (event, matches) in zip(events, matches) where !matches.isEmpty && allows(event.name) {
            let recorded = RecordedEvent(event, parameters: event.deliveredParameters)
            for match in matches {
                triggerCallbacks.send(
                    SurveyTrigger(surveyID: match.surveyID, event: recorded, explanation: match.explanation),
                    to: TriggerTopic())
            }
        }
    }
}
