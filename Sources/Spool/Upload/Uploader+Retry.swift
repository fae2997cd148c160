import Foundation
import SpoolStorage

/// Backing off after a failure, retrying when it is due, and the statistics
/// a user reads.
extension Uploader {
    /// A failed attempt: the events stay queued, the next attempt waits for
    /// the backoff, and `kind` reports it.
    func backOff(
        _ reason: String, retryAfter: TimeInterval?, events: Int, kind: SpoolDiagnostic.Kind = .uploadFailed
    ) throws -> Never {
        counters.failedRequests += 1
        failures += 1
        lastFailure = reason
        let delay = settings.retry.delay(attempt: failures, retryAfter: retryAfter, random: &random)
        scheduleRetry(after: delay)
        let what = kind == .uploadHeldBack ? "the collector refused the request itself" : "an upload failed"
        diagnostics.report(
            kind, eventCount: events,
            "\(what) (\(reason)); the events stay queued, next attempt in \(Int(delay.rounded())) s")
        try saveNotes()
        throw SpoolError.uploadDeferred(reason: reason)
    }

    /// A success: the backoff starts over.
    func recovered() {
        failures = 0
        retryAt = nil
        lastFailure = nil
        heldBack = nil
    }

    /// Another process holds the lease: try again once it expires.
    func retryWhenFree(_ lease: ConsumerLease) {
        let delay = max(1, min(settings.leaseDuration, lease.expires - now))
        scheduleRetry(after: delay, keepBackoff: true)
    }

    func scheduleRetry(after delay: TimeInterval, keepBackoff: Bool = false) {
        if !keepBackoff { retryAt = now + delay }
        retryGeneration += 1
        let generation = retryGeneration
        // A dispatch timer on the database queue, in the database's clock:
        // it keeps time however busy the concurrency pool is, and a test can
        // drive it. While suspended it starts nothing and asks for no
        // background window: the backoff is then over, and resuming
        // triggers a flush.
        log.database.timer(after: delay) { [weak self] firing in
            guard let self, case .awake = firing, self.signals.withLock({ $0.pending }) > 0 else { return }
            self.enter { $0.retryDue(generation: generation) }
        }
    }

    func retryDue(generation: Int) {
        guard generation == retryGeneration else { return }  // replaced or cancelled
        retryAt = nil
        if signals.withLock({ $0.pending }) > 0 { trigger(force: false) }
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
            failedRequests: counters.failedRequests, lastFailure: lastFailure,
            nextRetryIn: retryAt.flatMap { $0 > now ? $0 - now : nil }, heldBack: heldBack, compresses: compresses,
            waitingForNetwork: !networkAvailable || !policyAllows, paused: paused)
    }
}
