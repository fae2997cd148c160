import Foundation

/// The bisection of a refused batch, as a value: which of its events the
/// collector refuses on their own (rule C3).
///
/// It answers what ``Uploader`` does next — send some events
/// (``Action/probe(_:)``), read the batch after them
/// (``Action/readFollowing(after:)``), or settle (``Action/finish(_:)``) —
/// and takes what each step found; it sends nothing and reads no database
/// or clock (`BisectionPlanTests`). Ranges go in log order, a left half
/// settled before its right half is sent. An event is dead-lettered only on
/// evidence: refused alone while other events of the bisection were accepted
/// (one refused before any was is sent alone once more, after), a per-event
/// result, or a 413 to a one-event body larger than one accepted. Without
/// evidence in the batch, the batches after it are sent too. Until something
/// is accepted a budget bounds the requests; spent, nothing is singled out
/// and the batch is held back.
///
/// `Request`: what the uploader keeps of a request sent, handed back in
/// ``Finish/notes``.
struct BisectionPlan<Request> {
    typealias Outcome = Uploader.EventOutcome

    /// What ``Uploader`` does next.
    enum Action {
        /// Read the events still in the log among these positions (by their
        /// positions, never "the next n") and send them; answer with
        /// ``probed(_:)``.
        case probe([Int64])
        /// Read the batch after `after` (up to a batch); answer with
        /// ``followed(_:)``.
        case readFollowing(after: Int64)
        /// Publish the notes, settle, and end as the verdict says.
        case finish(Finish)
    }

    /// What a probe found.
    enum Probe {
        /// None of its events is in the log any more.
        case nothing
        /// The first event read is over the format's per-event limit: never
        /// sent, settled with `outcome`.
        case oversized(position: Int64, outcome: Outcome)
        /// Sent: the events still in the log, the body's size, the answer.
        case sent([Int64], bytes: Int, reading: Uploader.Reading, request: Request)
    }

    /// What reading the batch after the bisection found.
    enum Following {
        case nothing
        /// An event over the per-event limit: never sent, settled with
        /// `outcome` in log order with the rest.
        case oversized(position: Int64, outcome: Outcome)
        case batch([Int64])
    }

    /// How the bisection ends.
    struct Finish {
        /// Every position the bisection covered, in log order (the batch's,
        /// then those of the batches after it that were read).
        var positions: [Int64]
        var outcomes: [Int64: Outcome]
        /// Each request sent, in order, with its outcome to publish.
        var notes: [Note]
        var verdict: Verdict
    }

    /// One request's result to publish.
    struct Note {
        var request: Request
        /// The events it carried.
        var positions: [Int64]
        var outcome: UploadBatchResult.Outcome
        var detail: String? = nil
    }

    /// What the uploader does once the outcomes are settled.
    enum Verdict: Equatable {
        /// Every refused event decided: back off only for a retry among the
        /// outcomes, else recovered.
        case settled
        /// Keep what is left, as a refusal of the request.
        case holdBack(String, retryAfter: TimeInterval?)
        /// A transient failure stopped the bisection.
        case backOff(String, retryAfter: TimeInterval?)
    }

    /// A single event refused on its own (`bytes`: the refused body's
    /// size), and whether before the collector accepted anything.
    struct Refusal {
        var position: Int64
        var reason: String
        var status: Int
        var bytes: Int
        var beforeEvidence: Bool
    }

    private enum Phase {
        /// Sending the ranges on the stack, then the batches after.
        case exploring
        /// Sending alone once more the events refused before evidence.
        case rechecking(next: Int)
    }

    /// The refused batch's reason, for the verdict.
    let reason: String
    private(set) var positions: [Int64]
    private(set) var outcomes: [Int64: Outcome] = [:]
    private(set) var refusedAlone: [Refusal] = []
    private(set) var sawAccepted = false
    /// Requests left while nothing is accepted.
    private(set) var budget: Int
    /// The largest body the collector accepted in this launch.
    private(set) var largestAcceptedBody: Int
    private var notes: [Note] = []
    /// Ranges to send, the next one last.
    private var stack: [[Int64]] = []
    private var phase = Phase.exploring
    /// Set when the bisection stops before its end.
    private var ended: Verdict?
    /// The last position read; no more batches after it when `followingEnded`.
    private var after: Int64
    private var followingEnded = false
    /// The range of the probe in flight.
    private var inFlight: [Int64] = []

    /// A bisection of the batch at `positions` (log order), refused with
    /// `status` and `reason` for a body of `bytes`.
    init(
        positions: [Int64], status: Int, reason: String, bytes: Int, largestAcceptedBody: Int, budget: Int
    ) {
        self.reason = reason
        self.positions = positions
        self.budget = budget
        self.largestAcceptedBody = largestAcceptedBody
        after = positions.last ?? 0
        explore(positions, reason: reason, status: status, bytes: bytes)
    }

    /// The first action.
    mutating func start() -> Action {
        next()
    }

    /// A probe's result.
    mutating func probed(_ probe: Probe) -> Action {
        let range = inFlight
        inFlight = []
        switch probe {
        case .nothing:
            for position in range { outcomes[position] = .dropped }
        case .oversized(let position, let outcome):
            outcomes[position] = outcome
        case .sent(let sent, let bytes, let reading, let request):
            let kept = Set(sent)
            for position in range where !kept.contains(position) { outcomes[position] = .dropped }
            answered(sent, bytes: bytes, reading, request)
        }
        return next()
    }

    /// What reading the batch after `after` found.
    mutating func followed(_ following: Following) -> Action {
        switch following {
        case .nothing:
            followingEnded = true
            return next()
        case .oversized(let position, let outcome):
            positions.append(position)
            outcomes[position] = outcome
            after = position
            return .readFollowing(after: after)
        case .batch(let read):
            positions += read
            after = read.last ?? after
            if !read.isEmpty { stack.append(read) }
            return next()
        }
    }

    // MARK: - Steps

    private mutating func answered(_ sent: [Int64], bytes: Int, _ reading: Uploader.Reading, _ request: Request) {
        switch reading {
        case .accepted:
            for position in sent { outcomes[position] = .accepted }
            sawAccepted = true
            largestAcceptedBody = max(largestAcceptedBody, bytes)
            notes.append(Note(request: request, positions: sent, outcome: .accepted))
        case .perEvent(let results, let status):
            for (index, position) in sent.enumerated() {
                let outcome = Outcome(index < results.count ? results[index] : nil, status: status)
                if case .accepted = outcome { sawAccepted = true }
                outcomes[position] = outcome
            }
            notes.append(Note(request: request, positions: sent, outcome: .settledPerEvent))
        case .eventsRefused(let reason, let status, let singled):
            notes.append(Note(request: request, positions: sent, outcome: .bisected, detail: reason))
            if let position = sent.first, singled && sent.count == 1 {
                // The format's reading names this very event.
                outcomes[position] = .rejected(reason, status: status)
            } else if let position = sent.first, case .rechecking = phase {
                // Refused alone again, now that the collector accepts others.
                outcomes[position] = .rejected(reason, status: status)
            } else {
                explore(sent, reason: reason, status: status, bytes: bytes)
            }
        case .transient(let reason, let retryAfter, _):
            notes.append(Note(request: request, positions: sent, outcome: .retried, detail: reason))
            ended = .backOff(reason, retryAfter: retryAfter)
        case .requestRefused(let reason, let retryAfter, _):
            notes.append(Note(request: request, positions: sent, outcome: .heldBack, detail: reason))
            ended = .holdBack(reason, retryAfter: retryAfter)
        }
    }

    /// A refused range: a single event is refused alone; a longer one is
    /// split, its left half to be sent first.
    /// `bytes`: the size of the body refused for this range.
    private mutating func explore(_ range: [Int64], reason: String, status: Int, bytes: Int) {
        guard range.count > 1 else {
            if let position = range.first {
                refusedAlone.append(
                    Refusal(
                        position: position, reason: reason, status: status, bytes: bytes,
                        beforeEvidence: !sawAccepted))
            }
            return
        }
        let middle = range.count / 2
        stack.append(Array(range[middle...]))
        stack.append(Array(range[..<middle]))
    }

    /// Sends a range, within the budget while nothing is accepted.
    private mutating func send(_ range: [Int64]) -> Action? {
        if !sawAccepted {
            guard budget > 0 else {
                ended = inconclusive
                return nil
            }
            budget -= 1
        }
        inFlight = range
        return .probe(range)
    }

    private mutating func next() -> Action {
        if ended == nil, case .exploring = phase {
            if let range = stack.popLast() {
                if let action = send(range) { return action }
            } else if !sawAccepted, !refusedAlone.isEmpty, budget > 0, !followingEnded {
                // No evidence in what was sent: ask the events after it.
                return .readFollowing(after: after)
            } else {
                phase = .rechecking(next: 0)
            }
        }
        if ended == nil, sawAccepted, case .rechecking(var index) = phase {
            while index < refusedAlone.count {
                let refusal = refusedAlone[index]
                index += 1
                phase = .rechecking(next: index)
                guard refusal.beforeEvidence else {
                    outcomes[refusal.position] = .rejected(refusal.reason, status: refusal.status)
                    continue
                }
                if let action = send([refusal.position]) { return action }
            }
        }
        if ended == nil, !sawAccepted { decideBySize() }
        return .finish(finish())
    }

    /// With nothing accepted in the bisection, a 413 to one event whose
    /// request was larger than a body the collector took is still about that
    /// event: its size singles it out.
    private mutating func decideBySize() {
        guard largestAcceptedBody > 0 else { return }
        for refusal in refusedAlone where refusal.status == 413 && refusal.bytes > largestAcceptedBody {
            outcomes[refusal.position] = .rejected(refusal.reason, status: refusal.status)
        }
    }

    private mutating func finish() -> Finish {
        if ended != nil {
            // Stopped before the re-check: a refusal alone that came after an
            // acceptance is evidence all the same, and the events decided
            // before it (accepted ones too) are settled, not sent again.
            for refusal in refusedAlone where !refusal.beforeEvidence && outcomes[refusal.position] == nil {
                outcomes[refusal.position] = .rejected(refusal.reason, status: refusal.status)
            }
        }
        let published = notes.map { note -> Note in
            // A request of one event says what became of that event.
            guard note.positions.count == 1, let position = note.positions.first else { return note }
            var note = note
            if case .rejected? = outcomes[position] {
                note.outcome = .deadLettered
            } else if note.outcome == .bisected {
                note.outcome = .heldBack
            }
            return note
        }
        let undecided = refusedAlone.contains { outcomes[$0.position] == nil }
        let verdict = ended ?? (undecided ? inconclusive : .settled)
        return Finish(positions: positions, outcomes: outcomes, notes: published, verdict: verdict)
    }

    /// Refused whatever was sent: nothing singled out, the batch waits.
    private var inconclusive: Verdict {
        .holdBack(
            "\(reason): refused the same way whichever of its events were sent, so none is singled out",
            retryAfter: nil)
    }
}
