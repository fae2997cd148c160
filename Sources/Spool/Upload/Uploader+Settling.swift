import Foundation
import SpoolStorage

/// Settling a request's events: bisection of a refused batch, dead letters
/// by the exact positions that were sent, holding back on refusals of the
/// request, and the record of every request.
extension Uploader {
    /// What became of one event of a request.
    enum EventOutcome {
        case accepted
        case rejected(String, status: Int?)
        /// It stays queued (and everything after it).
        case retry(String)

        init(_ result: UploadVerdict.EventResult?, status: Int) {
            switch result {
            case .accepted?: self = .accepted
            case .rejected(let reason)?: self = .rejected(reason, status: status)
            case .retry(let reason)?: self = .retry("HTTP \(status): \(reason)")
            case nil: self = .retry("HTTP \(status): no result for this event")
            }
        }
    }

    /// What a bisection of one refused batch has learnt so far.
    struct Bisection {
        var outcomes: [Int64: EventOutcome] = [:]
        /// Single events refused on their own: dead letters once the
        /// collector accepted something else of the batch.
        var refusedAlone: [Int64: (reason: String, status: Int)] = [:]
        var sawAccepted = false
        /// Results to publish once the refused single events are decided.
        var notes: [(batch: UploadBatch, exchange: Exchange, outcome: UploadBatchResult.Outcome, detail: String?)] =
            []
    }

    /// How exploring a refused range ended.
    enum Exploration {
        case done
        /// Refused the same way at every level with nothing accepted: no
        /// event is singled out.
        case inconclusive
        /// A transient failure or a refusal of the request: stop here.
        case stop(Reading)
    }

    /// What one request of a bisection found.
    enum Probe {
        case settled
        case refused(positions: [Int64], reason: String, status: Int)
        case stop(Reading)

    }

    /// Finds the events of a refused batch the collector refuses on their
    /// own: each refused range is sent as two halves, and a half refused is
    /// split again, down to single events, in log order. At most about
    /// 2·log2(n) more requests per refused event. A batch refused the same
    /// way at every level before anything of it was accepted singles out
    /// nothing (about log2(n) requests find that out): the refusal is
    /// treated as one of the request, held back, nothing dead-lettered.
    func bisect(_ batch: UploadBatch, status: Int, reason: String, compress: Bool) async throws {
        var state = Bisection()
        let ended = try await explore(batch.positions[...], status: status, reason: reason, compress, &state)
        if state.sawAccepted {
            for (position, refusal) in state.refusedAlone {
                state.outcomes[position] = .rejected(refusal.reason, status: refusal.status)
            }
        }
        for note in state.notes {
            var outcome = note.outcome
            if note.batch.count == 1, state.refusedAlone[note.batch.first] != nil {
                outcome = state.sawAccepted ? .deadLettered : .heldBack
            }
            self.note(note.batch, note.exchange, outcome, detail: note.detail)
        }
        let settled = try settle(batch.positions, state.outcomes)
        switch ended {
        case .done where state.sawAccepted:
            if let retry = settled.retry { try backOff(retry, retryAfter: nil, events: settled.left) }
            recovered()
        case .done, .inconclusive:
            try holdBack(
                "\(reason): refused the same way at every level of a split, so no event is singled out",
                retryAfter: nil,
                events: settled.left)
        case .stop(.requestRefused(let reason, let retryAfter, _)):
            try holdBack(reason, retryAfter: retryAfter, events: settled.left)
        case .stop(let reading):
            var (reason, retryAfter) = ("interrupted", TimeInterval?.none)
            if case .transient(let why, let after, _) = reading { (reason, retryAfter) = (why, after) }
            try backOff(reason, retryAfter: retryAfter, events: settled.left)
        }
    }

    /// Explores a range the collector refused, in log order: its left half
    /// is settled (split further when refused) before its right half is
    /// sent, so events reach the collector in the order they were recorded.
    private func explore(
        _ positions: ArraySlice<Int64>, status: Int, reason: String, _ compress: Bool, _ state: inout Bisection
    ) async throws -> Exploration {
        if positions.count == 1, let position = positions.first {
            state.refusedAlone[position] = (reason, status)
            return .done
        }
        let middle = positions.startIndex + positions.count / 2
        let left = try await probe(positions[..<middle], compress, &state)
        switch left {
        case .stop(let reading): return .stop(reading)
        case .refused(let sent, let reason, let status):
            let ended = try await explore(sent[...], status: status, reason: reason, compress, &state)
            guard case .done = ended else { return ended }
        case .settled: break
        }
        let right = try await probe(positions[middle...], compress, &state)
        switch right {
        case .stop(let reading): return .stop(reading)
        case .refused(let sent, let reason, let status):
            // Refused on the left and on the right, and nothing taken: the
            // batch fails the same way at every level.
            guard state.sawAccepted else { return .inconclusive }
            return try await explore(sent[...], status: status, reason: reason, compress, &state)
        case .settled: return .done
        }
    }

    /// Sends the events still in the log among `positions` (read by their
    /// positions, as sent: never "the next n") and records what came of them.
    private func probe(_ positions: ArraySlice<Int64>, _ compress: Bool, _ state: inout Bisection) async throws
        -> Probe
    {
        guard let first = positions.first, let last = positions.last else { return .settled }
        let (consumer, format, owner, duration) = (Self.consumerID, client.format, self.owner, settings.leaseDuration)
        let (found, heldBy) = try log.database.onQueue { connection in
            try connection.transaction { () -> (UploadBatch.Read?, ConsumerLease?) in
                // Each read renews the lease: a bisection can take many requests.
                if let lease = try connection.acquireLease(
                    consumer, owner: owner, now: Date().timeIntervalSince1970, duration: duration)
                {
                    return (nil, lease)
                }
                return (
                    try UploadBatch.read(
                        after: first - 1, through: last, limit: positions.count, anyFormat: format, from: connection),
                    nil
                )
            }
        }
        if let heldBy { throw heldElsewhere(heldBy) }
        guard case .batch(let batch)? = found else { return .settled }  // the retention bound took them all
        let exchanged = await exchange(batch, compress: compress)
        counters.requests += 1
        let reading = read(exchanged.answer, eventCount: batch.count)
        switch reading {
        case .accepted:
            for position in batch.positions { state.outcomes[position] = .accepted }
            state.sawAccepted = true
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
            if singled && batch.count == 1 {
                state.outcomes[batch.first] = .rejected(reason, status: status)
                state.notes.append((batch, exchanged, .deadLettered, reason))
                return .settled
            }
            state.notes.append((batch, exchanged, .bisected, reason))
            return .refused(positions: batch.positions, reason: reason, status: status)
        case .transient(let reason, _, _):
            state.notes.append((batch, exchanged, .retried, reason))
            return .stop(reading)
        case .requestRefused(let reason, _, _):
            state.notes.append((batch, exchanged, .heldBack, reason))
            return .stop(reading)
        }
    }

    /// Settles `positions` (a request's, in log order) by `outcomes`, in one
    /// transaction: up to the first event without an outcome or with a
    /// retry, accepted events are done and rejected ones dead-lettered (read
    /// by their positions: an event the retention bound already dropped is
    /// counted as dropped only); the rest stay queued.
    ///
    /// - Returns: the first retry's reason, if any, and how many events stay
    ///   queued.
    @discardableResult
    func settle(_ positions: [Int64], _ outcomes: [Int64: EventOutcome]) throws -> (retry: String?, left: Int) {
        var through: Int64?
        var accepted = 0
        var rejected: [Int64: (reason: String, status: Int?)] = [:]
        var retry: String?
        for position in positions {
            switch outcomes[position] {
            case .accepted?: accepted += 1
            case .rejected(let reason, let status)?: rejected[position] = (reason, status)
            case .retry(let reason)?: retry = reason
            case nil: retry = "not sent on its own yet"
            }
            if retry != nil { break }
            through = position
        }
        let left = positions.count - (through.flatMap { positions.firstIndex(of: $0) }.map { $0 + 1 } ?? 0)
        guard let through, let first = positions.first else {
            try saveNotes()
            return (retry, left)
        }
        let (consumer, limits, records) = (Self.consumerID, deadLetterLimits, takeRecords())
        let deadLettered = try log.database.onQueue { connection in
            try connection.transaction { () -> Int in
                try connection.recordUploadBatches(records)
                let letters = rejected.isEmpty ? [] : try connection.readEvents(from: first, through: through)
                    .filter { rejected[$0.seq] != nil }
                let byReason = Dictionary(grouping: letters) { rejected[$0.seq].map { "\($0.status ?? 0) \($0.reason)" } ?? "" }
                for group in byReason.values {
                    guard let refusal = group.first.flatMap({ rejected[$0.seq] }) else { continue }
                    try connection.deadLetter(group, status: refusal.status, reason: refusal.reason, consumer: consumer)
                }
                if !letters.isEmpty { try self.enforce(limits, connection) }
                try connection.advanceConsumerInTransaction(consumer, to: through)
                return letters.count
            }
        }
        signals.withLock { $0.position = max($0.position, through) }
        counters.uploaded += accepted
        if deadLettered > 0 {
            let reason = rejected.sorted { $0.key < $1.key }.first?.value.reason ?? ""
            diagnostics.report(
                .eventsDeadLettered, eventCount: deadLettered,
                "the collector refused \(deadLettered) of \(positions.count) events on their own: \(reason)")
        }
        return (retry, left)
    }

    /// Applies the dead-letter bounds inside the caller's transaction,
    /// reporting what they removed.
    nonisolated func enforce(_ limits: DeadLetterLimits, _ connection: Connection) throws {
        let evicted = try connection.enforceDeadLetterLimits(
            maximumCount: limits.maximumCount,
            failedBefore: limits.maximumAge.map { Date().timeIntervalSince1970 - $0 })
        if evicted > 0 {
            diagnostics.report(
                .deadLettersEvicted, eventCount: evicted,
                "\(evicted) dead letters were removed by their bounds (count \(limits.maximumCount.map(String.init) ?? "none"), age \(limits.maximumAge.map { "\(Int($0)) s" } ?? "none"))")
        }
    }

    /// An event over the format's per-event limit is never sent: no
    /// collector of that kind would take it.
    func deadLetterOversized(at position: Int64, bytes: Int) throws {
        let limit = client.format.maximumEventBytes.map { " of \($0) bytes" } ?? ""
        try settle(
            [position],
            [position: .rejected("not sent: \(bytes) bytes, over the collector's per-event limit\(limit)", status: nil)])
    }

    // MARK: - Holding back and the record of requests

    /// The collector refused the request itself: keep the events, back off,
    /// and say why in the statistics and a diagnostic naming the status.
    func holdBack(_ reason: String, retryAfter: TimeInterval?, events: Int) throws -> Never {
        heldBack = reason
        try backOff(reason, retryAfter: retryAfter, events: events, kind: .uploadHeldBack)
    }

    /// Records one request's result: published to the result handler and
    /// streams now, written to `upload_batches` with the uploader's next
    /// transaction.
    func note(
        _ batch: UploadBatch, _ exchanged: Exchange, _ outcome: UploadBatchResult.Outcome, detail: String? = nil
    ) {
        lastRequestAccepted = outcome == .accepted
        var status: Int?
        var detail = detail
        switch exchanged.answer {
        case .response(let response, _): status = response.status
        case .failed(let reason): detail = detail ?? reason
        }
        let result = UploadBatchResult(
            firstEventID: batch.firstID, lastEventID: batch.lastID, eventCount: batch.count, status: status,
            detail: detail, outcome: outcome, duration: exchanged.duration, compressed: exchanged.compressed,
            sentAt: exchanged.sentAt)
        results?.publish(result)
        unsavedRecords.append(
            UploadBatchRecord(
                sentAt: exchanged.sentAt.timeIntervalSince1970, firstSeq: batch.first, lastSeq: batch.last,
                firstEventID: batch.firstID, lastEventID: batch.lastID, eventCount: batch.count, status: status,
                outcome: Self.column(outcome), detail: detail, compressed: exchanged.compressed,
                bodyBytes: batch.body.count, durationMilliseconds: exchanged.duration * 1_000))
    }

    /// The records not yet written, handed to a transaction.
    func takeRecords() -> [UploadBatchRecord] {
        defer { unsavedRecords.removeAll() }
        return unsavedRecords
    }

    /// Writes the records not yet written, in a transaction of their own.
    func saveNotes() throws {
        guard !unsavedRecords.isEmpty else { return }
        let records = takeRecords()
        try log.database.onQueue { connection in try connection.recordUploadBatches(records) }
    }

    /// The `upload_batches.outcome` value.
    static func column(_ outcome: UploadBatchResult.Outcome) -> String {
        switch outcome {
        case .accepted: "accepted"
        case .retried: "retried"
        case .heldBack: "held_back"
        case .bisected: "bisected"
        case .deadLettered: "dead_lettered"
        case .settledPerEvent: "per_event"
        }
    }
}

extension Connection {
    /// ``recordUploadBatch(_:)`` for each, in one transaction.
    func recordUploadBatches(_ records: [UploadBatchRecord]) throws {
        guard !records.isEmpty else { return }
        try transaction {
            for record in records { try recordUploadBatch(record) }
        }
    }
}
