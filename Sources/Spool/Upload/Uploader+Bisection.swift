import Foundation
import SpoolStorage

/// Bisection of a refused batch, performed: ``BisectionPlan`` decides which
/// events to send and what their answers single out; the uploader reads
/// them under the lease, sends them, and settles what the plan concludes.
extension Uploader {
    /// What the uploader keeps of a request a bisection sent, to publish
    /// its result once the bisection ends.
    struct BisectionRequest {
        let batch: UploadBatch
        let exchange: Exchange
    }

    typealias Bisection = BisectionPlan<BisectionRequest>

    /// Requests a bisection of `count` events may spend before anything is
    /// accepted: the way down to single events and back, twice (two
    /// requests per level of ⌈log2 n⌉, plus the re-check).
    static func bisectionBudget(_ count: Int) -> Int {
        2 * Int(log2(Double(max(2, count))).rounded(.up)) + 4
    }

    /// Finds the events of a refused batch the collector refuses on their
    /// own, settles the batch, and throws when some of it must wait.
    func bisect(_ batch: UploadBatch, status: Int, reason: String, compress: Bool) async throws {
        var plan = Bisection(
            positions: batch.positions, status: status, reason: reason, bytes: batch.body.count,
            largestAcceptedBody: largestAcceptedBody, budget: Self.bisectionBudget(batch.count))
        var action = plan.start()
        while true {
            switch action {
            case .probe(let positions):
                action = plan.probed(try await probe(positions, compress))
            case .readFollowing(let after):
                switch try readUnderLease(after: after, through: .max, limit: settings.batchSize) {
                case .oversized(let position, let bytes)?:
                    action = plan.followed(.oversized(position: position, outcome: oversized(bytes)))
                case .batch(let next)?: action = plan.followed(.batch(next.positions))
                case nil: action = plan.followed(.nothing)
                }
            case .finish(let finish):
                try conclude(finish)
                return
            }
        }
    }

    /// Publishes each request's result, settles the outcomes, and backs off
    /// or holds back as the bisection's verdict says.
    private func conclude(_ finish: Bisection.Finish) throws {
        for note in finish.notes {
            self.note(note.request.batch, note.request.exchange, note.outcome, detail: note.detail)
        }
        let settled = try settle(finish.positions, finish.outcomes)
        switch finish.verdict {
        case .settled:
            // Everything settled (or gone with the queue bound).
            if let retry = settled.retry { try backOff(retry, retryAfter: nil, events: settled.left) }
            recovered()
        case .holdBack(let reason, let retryAfter):
            try holdBack(reason, retryAfter: retryAfter, events: settled.left)
        case .backOff(let reason, let retryAfter):
            try backOff(reason, retryAfter: retryAfter, events: settled.left)
        }
    }

    /// Sends the events still in the log among `positions` (read by their
    /// positions, as sent: never "the next n").
    private func probe(_ positions: [Int64], _ compress: Bool) async throws -> Bisection.Probe {
        guard let first = positions.first, let last = positions.last else { return .nothing }
        let found = try readUnderLease(after: first - 1, through: last, limit: positions.count)
        if case .oversized(let position, let bytes)? = found {
            // Not in a batch as read, so not here either; settled in order all the same.
            return .oversized(position: position, outcome: oversized(bytes))
        }
        guard case .batch(let batch)? = found else { return .nothing }
        let exchanged = await exchange(batch, compress: compress)
        counters.requests += 1
        let reading = read(exchanged.answer, eventCount: batch.count)
        switch reading {
        case .accepted: largestAcceptedBody = max(largestAcceptedBody, batch.body.count)
        case .eventsRefused: counters.failedRequests += 1
        case .perEvent, .transient, .requestRefused: break
        }
        return .sent(
            batch.positions, bytes: batch.body.count, reading: reading,
            request: BisectionRequest(batch: batch, exchange: exchanged))
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
                let found = try UploadBatch.read(
                    after: position, through: last, limit: limit, anyFormat: format, clock: batchClock(),
                    from: connection)
                // Like every batch, it notes where it ends: a probe sent again
                // after a lost answer goes under the same key (W3).
                if case .batch(let batch)? = found {
                    try connection.noteBatchBound(first: batch.first, last: batch.last)
                }
                return (found, nil)
            }
        }
        if let heldBy { throw heldElsewhere(heldBy) }
        return found
    }
}
