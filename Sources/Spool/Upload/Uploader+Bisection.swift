import Foundation
import SpoolStorage

/// Bisection of a refused batch: which of its events does the collector
/// refuse on their own?
///
/// Ranges are explored in log order (a left half is settled before its right
/// half is sent), so events reach the collector in the order they were
/// recorded. An event is dead-lettered only when it was refused alone and
/// the collector accepted other events of the same bisection; one refused
/// before anything was accepted is sent alone once more before it is
/// dead-lettered (the collector may have been failing as a whole). Until
/// something is accepted, the bisection has a budget of requests: a batch
/// that exhausts it singles out nothing, and is held back as a refusal of
/// the request.
extension Uploader {
    /// What a bisection of one refused batch has learnt so far.
    struct Bisection {
        var outcomes: [Int64: EventOutcome] = [:]
        /// Single events refused on their own, and whether that was before
        /// the collector accepted anything of the bisection.
        var refusedAlone: [(position: Int64, reason: String, status: Int, bytes: Int, beforeEvidence: Bool)] = []
        var sawAccepted = false
        /// Requests left while nothing is accepted.
        var budget: Int
        /// Results to publish once the refused single events are decided.
        var notes: [(batch: UploadBatch, exchange: Exchange, outcome: UploadBatchResult.Outcome, detail: String?)] =
            []

        init(budget: Int) {
            self.budget = budget
        }
    }

    /// How exploring a refused range ended.
    enum Exploration {
        case done
        /// Refused the same way until the budget ran out with nothing
        /// accepted: no event is singled out.
        case inconclusive
        /// A transient failure or a refusal of the request: stop here.
        case stop(Reading)
    }

    /// What one request of a bisection found.
    enum Probe {
        case settled
        case refused(positions: [Int64], reason: String, status: Int, bytes: Int)
        case stop(Reading)
        case outOfBudget
    }

    /// Requests a bisection of `count` events may spend before anything is
    /// accepted: the way down to single events and back, twice (two
    /// requests per level of ⌈log2 n⌉, plus the re-check).
    static func bisectionBudget(_ count: Int) -> Int {
        2 * Int(log2(Double(max(2, count))).rounded(.up)) + 4
    }

    /// Finds the events of a refused batch the collector refuses on their
    /// own, settles the batch, and throws when some of it must wait. When
    /// the batch alone gives no evidence (a batch of one event, or one whose
    /// every event was refused), the events after it (up to a batch) are
    /// sent too: accepted, they single the refused ones out; refused as
    /// well, nothing is singled out and the batch waits.
    func bisect(_ batch: UploadBatch, status: Int, reason: String, compress: Bool) async throws {
        var positions = batch.positions
        var state = Bisection(budget: Self.bisectionBudget(batch.count))
        var ended = try await explore(
            positions[...], status: status, reason: reason, bytes: batch.body.count, compress, &state)
        // No evidence in the batch: ask the events after it, a batch at a
        // time, while the budget lasts. The collector may take them.
        var after = batch.last
        while !state.sawAccepted, !state.refusedAlone.isEmpty, state.budget > 0, case .done = ended {
            var following = try readUnderLease(after: after, through: .max, limit: settings.batchSize)
            while case .oversized(let at, let bytes)? = following {
                // Never sent; dead-lettered in log order with the rest.
                positions.append(at)
                state.outcomes[at] = oversized(bytes)
                after = at
                following = try readUnderLease(after: after, through: .max, limit: settings.batchSize)
            }
            guard case .batch(let next)? = following else { break }
            positions += next.positions
            after = next.last
            ended = try await exploreUnknown(next.positions[...], compress, &state)
        }
        if case .done = ended {
            if state.sawAccepted {
                ended = try await recheck(compress, &state)
            } else {
                decideBySize(&state)
            }
        }
        for note in state.notes {
            var outcome = note.outcome
            if note.batch.count == 1, case .rejected? = state.outcomes[note.batch.first] {
                outcome = .deadLettered
            } else if note.batch.count == 1, note.outcome == .bisected {
                outcome = .heldBack
            }
            self.note(note.batch, note.exchange, outcome, detail: note.detail)
        }
        let undecided = state.refusedAlone.filter { state.outcomes[$0.position] == nil }.count
        let settled = try settle(positions, state.outcomes)
        switch ended {
        case .done where undecided == 0:
            // Everything settled (or gone with the queue bound).
            if let retry = settled.retry { try backOff(retry, retryAfter: nil, events: settled.left) }
            recovered()
        case .done, .inconclusive:
            try holdBack(
                "\(reason): refused the same way whichever of its events were sent, so none is singled out",
                retryAfter: nil, events: settled.left)
        case .stop(.requestRefused(let reason, let retryAfter, _)):
            try holdBack(reason, retryAfter: retryAfter, events: settled.left)
        case .stop(let reading):
            var (reason, retryAfter) = ("interrupted", TimeInterval?.none)
            if case .transient(let why, let after, _) = reading { (reason, retryAfter) = (why, after) }
            try backOff(reason, retryAfter: retryAfter, events: settled.left)
        }
    }

    /// With nothing accepted in the bisection, a 413 to one event whose
    /// request was larger than a body the collector took in this launch is
    /// still about that event: its size singles it out.
    private func decideBySize(_ state: inout Bisection) {
        guard largestAcceptedBody > 0 else { return }
        for refusal in state.refusedAlone where refusal.status == 413 && refusal.bytes > largestAcceptedBody {
            state.outcomes[refusal.position] = .rejected(refusal.reason, status: refusal.status)
        }
    }

    /// Explores a range the collector refused: its left half, then its
    /// right half, each split again when refused.
    /// `bytes`: the size of the body that was refused for this range.
    private func explore(
        _ positions: ArraySlice<Int64>, status: Int, reason: String, bytes: Int, _ compress: Bool,
        _ state: inout Bisection
    ) async throws -> Exploration {
        if positions.count == 1, let position = positions.first {
            state.refusedAlone.append((position, reason, status, bytes, !state.sawAccepted))
            return .done
        }
        let middle = positions.startIndex + positions.count / 2
        let left = try await exploreUnknown(positions[..<middle], compress, &state)
        guard case .done = left else { return left }
        return try await exploreUnknown(positions[middle...], compress, &state)
    }

    /// Sends a range whose answer is not known yet, and explores it when
    /// refused.
    private func exploreUnknown(_ positions: ArraySlice<Int64>, _ compress: Bool, _ state: inout Bisection)
        async throws -> Exploration
    {
        switch try await probe(positions, compress, &state) {
        case .settled: return .done
        case .stop(let reading): return .stop(reading)
        case .outOfBudget: return .inconclusive
        case .refused(let sent, let reason, let status, let bytes):
            return try await explore(sent[...], status: status, reason: reason, bytes: bytes, compress, &state)
        }
    }

    /// Events refused alone before anything was accepted are sent alone
    /// once more: the collector may have been refusing everything then.
    /// Refused again (now that it accepts others), they are dead letters.
    private func recheck(_ compress: Bool, _ state: inout Bisection) async throws -> Exploration {
        for refusal in state.refusedAlone {
            if !refusal.beforeEvidence {
                state.outcomes[refusal.position] = .rejected(refusal.reason, status: refusal.status)
                continue
            }
            switch try await probe([refusal.position], compress, &state) {
            case .settled, .outOfBudget: break
            case .stop(let reading): return .stop(reading)
            case .refused(_, let reason, let status, _):
                state.outcomes[refusal.position] = .rejected(reason, status: status)
            }
        }
        return .done
    }

    /// Sends the events still in the log among `positions` (read by their
    /// positions, as sent: never "the next n"); those the queue bound
    /// deleted meanwhile are settled as dropped.
    private func probe(_ positions: ArraySlice<Int64>, _ compress: Bool, _ state: inout Bisection) async throws
        -> Probe
    {
        guard let first = positions.first, let last = positions.last else { return .settled }
        if !state.sawAccepted {
            guard state.budget > 0 else { return .outOfBudget }
            state.budget -= 1
        }
        let found = try readUnderLease(after: first - 1, through: last, limit: positions.count)
        if case .oversized(let at, let bytes)? = found {
            // Not in a batch as read, so not here either; settled in order all the same.
            state.outcomes[at] = oversized(bytes)
            return .settled
        }
        guard case .batch(let batch)? = found else {
            for position in positions { state.outcomes[position] = .dropped }
            return .settled
        }
        let sent = Set(batch.positions)
        for position in positions where !sent.contains(position) { state.outcomes[position] = .dropped }
        let exchanged = await exchange(batch, compress: compress)
        counters.requests += 1
        let reading = read(exchanged.answer, eventCount: batch.count)
        switch reading {
        case .accepted:
            for position in batch.positions { state.outcomes[position] = .accepted }
            state.sawAccepted = true
            largestAcceptedBody = max(largestAcceptedBody, batch.body.count)
            state.notes.append((batch, exchanged, .accepted, nil))
            return .settled
        case .perEvent(let results, let status):
            for (index, position) in batch.positions.enumerated() {
                let outcome = EventOutcome(index < results.count ? results[index] : nil, status: status)
                if case .accepted = outcome { state.sawAccepted = true }
                state.outcomes[position] = outcome
            }
            state.notes.append((batch, exchanged, .settledPerEvent, nil))
            return .settled
        case .eventsRefused(let reason, let status, let singled):
            counters.failedRequests += 1
            state.notes.append((batch, exchanged, .bisected, reason))
            if singled && batch.count == 1 {
                // The format's reading names this very event.
                state.outcomes[batch.first] = .rejected(reason, status: status)
                return .settled
            }
            return .refused(positions: batch.positions, reason: reason, status: status, bytes: batch.body.count)
        case .transient(let reason, _, _):
            state.notes.append((batch, exchanged, .retried, reason))
            return .stop(reading)
        case .requestRefused(let reason, _, _):
            state.notes.append((batch, exchanged, .heldBack, reason))
            return .stop(reading)
        }
    }

    /// Reads the events after `position` up to `last` into a batch, renewing
    /// the lease in the same transaction (a bisection can take many
    /// requests).
    private func readUnderLease(after position: Int64, through last: Int64, limit: Int) throws -> UploadBatch.Read? {
        try checkSameFileAsRead()
        let (consumer, format, owner, duration) = (Self.consumerID, client.format, self.owner, settings.leaseDuration)
        let (found, heldBy) = try log.database.onQueue { connection in
            try connection.transaction { () -> (UploadBatch.Read?, ConsumerLease?) in
                if let lease = try connection.acquireLease(
                    consumer, owner: owner, now: now, duration: duration)
                {
                    return (nil, lease)
                }
                // Reporting no loss: what the refused request reported is
                // reported again by a request after the bisection.
                return (
                    try UploadBatch.read(
                        after: position, through: last, limit: limit, anyFormat: format, clock: batchClock(),
                        from: connection),
                    nil
                )
            }
        }
        if let heldBy { throw heldElsewhere(heldBy) }
        return found
    }
}
