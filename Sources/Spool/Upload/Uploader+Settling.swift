import Foundation
import SpoolStorage

/// Settling a request's events: dead letters by the exact positions that
/// were sent, holding back on refusals of the request, and the record of
/// every request.
extension Uploader {
    /// What became of one event of a request.
    enum EventOutcome {
        case accepted
        case rejected(String, status: Int?)
        /// It stays queued (and everything after it).
        case retry(String)
        /// The queue bound deleted it while its request was in flight: it is
        /// counted as dropped, and passed.
        case dropped

        init(_ result: UploadVerdict.EventResult?, status: Int) {
            switch result {
            case .accepted?: self = .accepted
            case .rejected(let reason)?: self = .rejected(reason, status: status)
            case .retry(let reason)?: self = .retry("HTTP \(status): \(reason)")
            case nil: self = .retry("HTTP \(status): no result for this event")
            }
        }
    }

    /// Settles `positions` (a request's, in log order) by `outcomes`, in one
    /// transaction: up to the first event without an outcome or with a
    /// retry, accepted events are done and rejected ones dead-lettered (read
    /// by their positions: an event the retention bound already dropped is
    /// counted as dropped only); the rest stay queued. With `acceptedFrom`, the
    /// first position of the request the collector answered 2xx, the loss
    /// that request reported is settled in the same transaction.
    ///
    /// - Returns: the first retry's reason, if any, and how many events stay
    ///   queued.
    @discardableResult
    func settle(_ positions: [Int64], _ outcomes: [Int64: EventOutcome], acceptedFrom: Int64? = nil) throws -> (
        retry: String?, left: Int
    ) {
        var through: Int64?
        var accepted = 0
        var rejected: [Int64: (reason: String, status: Int?)] = [:]
        var retry: String?
        for position in positions {
            switch outcomes[position] {
            case .accepted?: accepted += 1
            case .dropped?: break
            case .rejected(let reason, let status)?: rejected[position] = (reason, status)
            case .retry(let reason)?: retry = reason
            case nil: retry = "not sent on its own yet"
            }
            if retry != nil { break }
            through = position
        }
        let left = positions.count - (through.flatMap { positions.firstIndex(of: $0) }.map { $0 + 1 } ?? 0)
        let lossCounted = signals.withLock { $0.lossCounted }
        guard let through, let first = positions.first else {
            if let acceptedFrom, lossCounted {
                // Nothing to settle but what the accepted request reported.
                try checkSameFileAsRead()
                let position = signals.withLock { $0.position }
                try log.database.onQueue { connection in
                    try connection.transaction { try connection.settleLoss(accepted: acceptedFrom, through: position) }
                }
            }
            try saveNotes()
            return (retry, left)
        }
        try checkSameFileAsRead()
        let (consumer, limits, records) = (Self.consumerID, deadLetterLimits, unsavedRecords)
        let deadLettered = try log.database.onQueue { connection in
            try connection.sealingTransaction { () -> Int in
                try connection.recordUploadBatches(records)
                if lossCounted { try connection.settleLoss(accepted: acceptedFrom, through: through) }
                let read = rejected.isEmpty ? [] : try connection.readEvents(from: first, through: through, now: now)
                let letters = read.filter { rejected[$0.seq] != nil }
                let byReason = Dictionary(grouping: letters) { letter in
                    rejected[letter.seq].map { "\($0.status ?? 0) \($0.reason)" } ?? ""
                }
                for group in byReason.values {
                    guard let refusal = group.first.flatMap({ rejected[$0.seq] }) else { continue }
                    try connection.deadLetter(
                        group, status: refusal.status, reason: refusal.reason, consumer: consumer, now: now)
                }
                if !letters.isEmpty { try self.enforce(limits, connection) }
                try connection.advanceConsumerInTransaction(consumer, to: through)
                return letters.count
            }
        }
        recordsWritten(records.count)
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
            failedBefore: limits.maximumAge.map { now - $0 })
        if evicted > 0 {
            diagnostics.report(
                .deadLettersEvicted, eventCount: evicted,
                "\(evicted) dead letters were removed by their bounds (count \(limits.maximumCount.map(String.init) ?? "none"), "
                    + "age \(limits.maximumAge.map { "\(Int($0)) s" } ?? "none"))")
        }
    }

    /// An event over the format's per-event limit is never sent: no
    /// collector of that kind would take it.
    func deadLetterOversized(at position: Int64, bytes: Int) throws {
        try settle([position], [position: oversized(bytes)])
    }

    /// The outcome of an event over the format's per-event limit.
    func oversized(_ bytes: Int) -> EventOutcome {
        let limit = client.format.maximumEventBytes.map { " of \($0) bytes" } ?? ""
        return .rejected("not sent: \(bytes) bytes, over the collector's per-event limit\(limit)", status: nil)
    }

    // MARK: - Holding back and the record of requests

    /// The collector refused the request itself: keep the events, back off,
    /// and say why in the statistics and a diagnostic naming the status.
    func holdBack(_ reason: String, retryAfter: TimeInterval?, events: Int) throws -> Never {
        try backOff(reason, retryAfter: retryAfter, events: events, kind: .uploadHeldBack)
    }

    /// Records one request's result: published to the result handler and
    /// streams now, written to `upload_batches` with a later transaction of
    /// the uploader (``unsavedRecords``).
    func note(
        _ batch: UploadBatch, _ exchanged: Exchange, _ outcome: UploadBatchResult.Outcome, detail: String? = nil
    ) {
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
                firstEventID: batch.firstID, lastEventID: batch.lastID, eventCount: batch.count,
                eventIDs: batch.idsJSON, status: status,
                outcome: Self.column(outcome), detail: detail, compressed: exchanged.compressed,
                bodyBytes: batch.body.count, durationMilliseconds: exchanged.duration * 1_000))
    }

    /// The first `count` records not yet written are in `upload_batches`
    /// now: a transaction that wrote them committed. (One that failed leaves
    /// them for the next.)
    func recordsWritten(_ count: Int) {
        unsavedRecords.removeFirst(count)
    }

    /// Drops the records not yet written: erasure deletes every request's
    /// record, and these name the erased events. Call while paused.
    func forgetUnsavedRecords() {
        unsavedRecords.removeAll()
    }

    /// Writes the records not yet written, in a transaction of their own.
    func saveNotes() throws {
        guard !unsavedRecords.isEmpty else { return }
        let records = unsavedRecords
        try log.database.onQueue { connection in try connection.recordUploadBatches(records) }
        recordsWritten(records.count)
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
