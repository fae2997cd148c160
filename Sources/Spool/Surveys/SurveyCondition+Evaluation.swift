import Foundation
import SpoolStorage

extension SurveyCondition {
    /// The condition's verdict over `history`, for the survey `surveyID`
    /// (sampling hashes it). `exhaustive` evaluates every part of an `all`
    /// and `any`; otherwise the parts after the one that decided are
    /// ``ConditionVerdict/Observation/notEvaluated``.
    func verdict(over history: HistoryAsOf, surveyID: String, exhaustive: Bool) throws -> ConditionVerdict {
        switch self {
        case .eventFrequency(let frequency):
            let cap = min(frequency.count, Int.max - 1) + 1
            let occurrences: Int
            switch history.start(of: frequency.window) {
            case .none: occurrences = 0
            case .ever:
                occurrences = try history.count(of: frequency.eventName, where: frequency.filter, since: nil, cap: cap)
            case .from(let since):
                occurrences = try history.count(
                    of: frequency.eventName, where: frequency.filter, since: since, cap: cap)
            }
            return ConditionVerdict(
                self, .occurrences(occurrences, orMore: occurrences >= cap), holds: frequency.holds(for: occurrences))
        case .sequence(let sequence):
            let matched = try sequence.latestMatch(in: history)
            return ConditionVerdict(
                self, .sequenceMatched(at: matched.map(Date.init(timeIntervalSince1970:))), holds: matched != nil)
        case .timeSinceLast(let since):
            let last = try history.latest(since.eventName, atOrBefore: history.time, excludingTheEvent: true)
            let elapsed = last.map { max(0, history.time - $0) }
            return ConditionVerdict(self, .secondsSinceLast(elapsed), holds: since.holds(for: elapsed))
        case .trait(let trait, let match):
            let value = history.identity.traits[trait]
            return ConditionVerdict(self, .traitValue(value), holds: match.matches(value?.historyValue))
        case .sampled(let percent):
            guard let anonymousID = history.identity.anonymousID else {
                return ConditionVerdict(self, .notEvaluated, holds: false)
            }
            let bucket = SampleBucket.of(anonymousID: anonymousID, surveyID: surveyID)
            return ConditionVerdict(self, .bucket(bucket), holds: bucket < percent)
        case .all(let conditions), .any(let conditions):
            let deciding = if case .all = self { false } else { true }
            var parts: [ConditionVerdict] = []
            var decided = false
            for condition in conditions {
                if decided && !exhaustive {
                    parts.append(ConditionVerdict(condition, .notEvaluated, holds: nil))
                    continue
                }
                let part = try condition.verdict(over: history, surveyID: surveyID, exhaustive: exhaustive)
                if part.holds == deciding { decided = true }
                parts.append(part)
            }
            return ConditionVerdict(self, .combined, holds: decided == deciding, parts: parts)
        case .not(let condition):
            let part = try condition.verdict(over: history, surveyID: surveyID, exhaustive: exhaustive)
            return ConditionVerdict(self, .combined, holds: part.holds == false, parts: [part])
        }
    }

    /// Whether the condition holds now over the persisted history
    /// (spool-bench measures this: the reads without the hop to the queue).
    package func holds(atNow time: Double, in connection: Connection) throws -> Bool {
        let history = HistoryAsOf.now(
            time, sessionID: nil, identity: EvaluationIdentity(anonymousID: nil, traitsJSON: "{}"), in: connection)
        return try verdict(over: history, surveyID: "", exhaustive: false).holds == true
    }
}

extension EventSequence {
    /// The millisecond of the latest occurrence of ``second`` that completes
    /// the sequence at this evaluation, or nil.
    ///
    /// Walks back from the latest candidate, jumping over what cannot
    /// match: when the nearest ``first`` before a candidate is too early, to
    /// the candidates that one could reach; when the absent event followed a
    /// candidate, to those it does not follow. Each step moves to an earlier
    /// candidate, so it ends, and a few index seeks usually answer.
    func latestMatch(in history: HistoryAsOf) throws -> Double? {
        let half = HistoryAsOf.halfMillisecond
        var earliest = -Double.infinity
        switch history.start(of: window) {
        case .none: return nil
        case .ever: break
        case .from(let start): earliest = HistoryMillisecond.of(start)
        }
        // With a session gap, both events lie in the session.
        var earliestFirst = -Double.infinity
        if case .thisSession = gap {
            guard let start = history.sessionStart else { return nil }
            earliestFirst = HistoryMillisecond.of(start)
            earliest = max(earliest, earliestFirst)
        }
        var absentFor: Double?
        if let absence, case .last(let seconds) = absence.within { absentFor = seconds }
        var candidate = try history.latest(second, atOrBefore: history.time - (absentFor ?? 0))
        while let end = candidate, end + half >= earliest {
            guard let start = try history.latest(first, atOrBefore: end + half), start + half >= earliestFirst else {
                return nil
            }
            if case .last(let seconds) = gap, end - start > seconds + half {
                // Every candidate after `start + seconds` is too far from a `first`.
                candidate = try history.latest(second, atOrBefore: min(start + seconds + half, end - half))
                continue
            }
            guard let absence, let absentFor else { return end }
            guard
                let absent = try history.earliest(
                    absence.eventName, from: end + 3 * half, to: end + absentFor + half)
            else { return end }
            // `absent` follows every candidate from `absent - absentFor` on.
            candidate = try history.latest(second, atOrBefore: min(absent - absentFor - half, end - half))
        }
        return nil
    }
}
