import Foundation

/// What a collector's answer means for the events of one request: what
/// ``BatchFormat/verdict(for:eventCount:)`` returns and the uploader acts on.
public enum UploadVerdict: Sendable, Hashable {
    /// The collector took every event: Spool moves past them and deletes
    /// what every consumer has finished.
    case accepted
    /// Nothing was taken, and the events may be taken later (the collector
    /// is down, busy or rate-limiting): they stay queued and are retried with
    /// backoff, or after `retryAfter` seconds when the collector said so.
    case retry(reason: String, retryAfter: TimeInterval?)
    /// The request was refused as a whole, possibly because of its size or
    /// one bad event: Spool sends each half again, down to single events, so
    /// that only the events the collector refuses on their own are
    /// dead-lettered.
    case split(reason: String)
    /// The collector will never take these events: they go to the dead
    /// letters with the status and `reason`.
    case rejected(reason: String)
    /// The collector answered for each event, in request order (one result
    /// per event). Events up to the first ``EventResult/retry(reason:)`` are
    /// settled: accepted ones are done, rejected ones are dead-lettered.
    /// From the first retry on, every event stays queued and is sent again,
    /// including accepted ones after it (at least once: deduplicate on the
    /// event id). A missing result counts as a retry.
    case perEvent([EventResult])

    /// What the collector said about one event.
    public enum EventResult: Sendable, Hashable {
        /// The collector took it.
        case accepted
        /// A failure that may pass if the event is sent again.
        case retry(reason: String)
        /// A failure that will not: the event is dead-lettered with `reason`.
        case rejected(reason: String)
    }

    /// Spool's reading of a plain HTTP answer, for collectors that answer per
    /// request:
    ///
    /// | status | verdict |
    /// |---|---|
    /// | 2xx | accepted |
    /// | 1xx, 3xx, 408, 429, 5xx | retry (honouring `Retry-After`) |
    /// | 400, 413 | split |
    /// | other 4xx | rejected |
    public static func standard(for response: UploadResponse) -> UploadVerdict {
        let status = response.status
        if (200..<300).contains(status) { return .accepted }  // the common case: no reason to build
        let reason = describe(response)
        switch status {
        case 400, 413: return .split(reason: reason)
        case 408, 429: return .retry(reason: reason, retryAfter: response.retryAfter)
        case 400..<500: return .rejected(reason: reason)
        default: return .retry(reason: reason, retryAfter: response.retryAfter)
        }
    }

    /// `HTTP <status>: <start of the body>`, for reasons.
    public static func describe(_ response: UploadResponse) -> String {
        "HTTP \(response.status)" + (response.message().map { ": " + $0 } ?? "")
    }
}
