import Foundation
import SpoolStorage

/// Backing off after a failure, retrying when it is due, and the statistics
/// a user reads.
extension Uploader {
    /// A failed attempt: the events stay queued, the next attempt waits for
    /// the backoff, and `kind` reports it (``SpoolDiagnostic/Kind/uploadHeldBack``:
    /// the collector refused the request itself, as the statistics say).
    func backOff(
        _ reason: String, retryAfter: TimeInterval?, events: Int, kind: SpoolDiagnostic.Kind = .uploadFailed
    ) throws -> Never {
        counters.failedRequests += 1
        let timer = schedule.failed(reason, retryAfter: retryAfter, heldBack: kind == .uploadHeldBack, now: now)
        armRetryTimer(timer)
        let what = kind == .uploadHeldBack ? "the collector refused the request itself" : "an upload failed"
        diagnostics.report(
            kind, eventCount: events,
            "\(what) (\(reason)); the events stay queued, next attempt in \(Int(timer.delay.rounded())) s")
        try saveNotes()
        throw SpoolError.uploadDeferred(reason: reason)
    }

    /// A success: the backoff starts over.
    func recovered() {
        schedule.recovered()
    }

    /// Arms `timer`: a dispatch timer on the database queue, in the
    /// database's clock, so it keeps time however busy the concurrency pool
    /// is, and a test can drive it. While suspended it starts nothing and
    /// asks for no background window: the backoff is then over, and resuming
    /// triggers a flush.
    func armRetryTimer(_ timer: UploadSchedule<CheckedContinuation<Void, any Error>, @Sendable () -> Void>.RetryTimer) {
        log.database.timer(after: timer.delay) { [weak self] firing in
            guard let self, case .awake = firing, self.hasPending else { return }
            self.enter { $0.pull($0.schedule.retryDue(generation: timer.generation, pending: $0.hasPending)) }
        }
    }

    /// Now, in seconds of the database's clock (``SpoolClock``): what the
    /// backoff, leases and batch records are measured in.
    nonisolated var now: Double { log.database.clock.now }

    /// Now, on the clocks a body is built at: its `sentAt`, and the
    /// monotonic clock of this launch, which each event's age is measured
    /// on.
    nonisolated func batchClock() -> BatchClock {
        BatchClock(log.database.clock, launch: log.launch)
    }

    // MARK: - Statistics

    func statistics() throws -> UploadStatistics {
        let (overCount, overBytes, overAge) = try log.database.onQueue { connection in
            (
                try connection.counter("dropped_count"), try connection.counter("dropped_bytes"),
                try connection.counter("dropped_age")
            )
        }
        let (dropped, deadLettered, evicted, position, head, paused) = try log.database.onQueue { connection in
            (
                try connection.droppedCount(of: Self.consumerID),
                try connection.deadLetterCount(),
                try connection.counter("dead_letters_evicted_count") + connection.counter("dead_letters_evicted_age"),
                try connection.position(of: Self.consumerID) ?? 0,
                try connection.headPosition(),
                try connection.uploadsPaused()
            )
        }
        return UploadStatistics(
            pending: Int(clamping: max(0, head - position)), dropped: dropped, droppedOverCount: overCount,
            droppedOverBytes: overBytes, droppedOverAge: overAge, deadLettered: deadLettered,
            deadLettersEvicted: evicted, uploaded: counters.uploaded, requests: counters.requests,
            failedRequests: counters.failedRequests, lastFailure: schedule.lastFailure,
            nextRetryIn: schedule.nextRetry(now: now), heldBack: schedule.heldBack, compresses: compresses,
            waitingForNetwork: !schedule.mayUseNetwork, paused: paused)
    }
}
