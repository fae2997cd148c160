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
        throw UploadError.retryable(reason)
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
        let delay = max(1, min(settings.leaseDuration, lease.expires - Date().timeIntervalSince1970))
        scheduleRetry(after: delay, keepBackoff: true)
    }

    func scheduleRetry(after delay: TimeInterval, keepBackoff: Bool = false) {
        if !keepBackoff { retryAt = Date().addingTimeInterval(delay) }
        retryTask?.cancel()
        // A task, not structured work: the retry outlives the flush that
        // failed, and is cancelled by the next one or by stop().
        retryTask = Task { [weak self] in
            try? await Task.sleep(nanoseconds: Self.nanoseconds(delay))  // try?: cancelled means no retry
            guard !Task.isCancelled else { return }
            await self?.retryDue()
        }
    }

    func retryDue() {
        retryAt = nil
        if signals.withLock({ $0.pending }) > 0 { trigger(force: false) }
    }

    /// `seconds` as whole nanoseconds for `Task.sleep`, saturating instead of
    /// trapping on a huge or non-finite interval. The cap is `Int64.max`:
    /// older concurrency runtimes end a longer sleep at once.
    static func nanoseconds(_ seconds: TimeInterval) -> UInt64 {
        let nanoseconds = seconds * 1e9
        guard nanoseconds > 0 else { return 0 }  // also NaN
        return nanoseconds < 9.2e18 ? UInt64(nanoseconds) : UInt64(Int64.max)
    }

    // MARK: - Statistics

    func statistics() throws -> UploadStatistics {
        let (overCount, overBytes, overAge) = try log.database.onQueue { connection in
            (
                try connection.counter("dropped_count"), try connection.counter("dropped_bytes"),
                try connection.counter("dropped_age")
            )
        }
        let (dropped, deadLettered, evicted, position, head) = try log.database.onQueue { connection in
            (
                try connection.droppedCount(of: Self.consumerID),
                try connection.deadLetterCount(),
                try connection.counter("dead_letters_evicted_count") + connection.counter("dead_letters_evicted_age"),
                try connection.position(of: Self.consumerID) ?? 0,
                try connection.headPosition()
            )
        }
        return UploadStatistics(
            pending: Int(clamping: max(0, head - position)), dropped: dropped, droppedOverCount: overCount,
            droppedOverBytes: overBytes, droppedOverAge: overAge, deadLettered: deadLettered,
            deadLettersEvicted: evicted, uploaded: counters.uploaded, requests: counters.requests,
            failedRequests: counters.failedRequests, lastFailure: lastFailure,
            nextRetryIn: retryAt.map { max(0, $0.timeIntervalSinceNow) }, heldBack: heldBack, compresses: compresses,
            waitingForNetwork: !networkAvailable)
    }
}
