import Foundation

/// What a collector's answer means for the events of one request: what
/// ``BatchFormat/verdict(for:eventCount:)`` returns and the uploader acts on.
@_spi(FormatAuthoring) public enum UploadVerdict: Sendable, Hashable {
    /// The collector took every event: Spool moves past them and deletes
    /// what every consumer has finished.
    case accepted
    /// Nothing was taken, and the events may be taken later (the collector
    /// is down, busy or rate-limiting): they stay queued and are retried with
    /// backoff, or after `retryAfter` seconds when the collector said so.
    case retry(reason: String, retryAfter: TimeInterval?)
    /// The collector refused the request itself, not its events (a wrong
    /// key, a disabled source, a path that is not there during a deploy):
    /// the events stay queued, uploading is held back with backoff, and
    /// ``UploadStatistics/heldBack`` and a
    /// ``SpoolDiagnostic/Kind/uploadHeldBack`` diagnostic say why.
    case refusedRequest(reason: String, retryAfter: TimeInterval?)
    /// The collector refused something in the request (a bad event, or the
    /// size): Spool sends each half on its own to find the events the
    /// collector refuses while it accepts their neighbours, and dead-letters
    /// only those. When both halves are refused too and nothing was accepted,
    /// no event is singled out: the refusal is treated as
    /// ``refusedRequest(reason:retryAfter:)``.
    case split(reason: String)
    /// The collector will never take these events. A request of one event is
    /// dead-lettered with the status and `reason`; a larger one is split as
    /// ``split(reason:)`` is, so that only events singled out are
    /// dead-lettered.
    case rejected(reason: String)
    /// The collector answered for each event, in request order (one result
    /// per event). Events up to the first ``EventResult/retry(reason:)`` are
    /// settled: accepted ones are done, rejected ones are dead-lettered.
    /// From the first retry on, every event stays queued and is sent again,
    /// including accepted ones after it (at least once: deduplicate on the
    /// event id). A missing result counts as a retry.
    case perEvent([EventResult])

    /// What the collector said about one event.
    @_spi(FormatAuthoring) public enum EventResult: Sendable, Hashable {
        /// The collector took it.
        case accepted
        /// A failure that may pass if the event is sent again.
        case retry(reason: String)
        /// A failure that will not: the event is dead-lettered with `reason`.
        case rejected(reason: String)
    }

    /// Spool's reading of a plain HTTP answer, for collectors that answer per
    /// request. This switch is the classification table (the Uploading
    /// article and docs/BEHAVIOUR.md show the same table):
    ///
    /// | status | verdict | why |
    /// |---|---|---|
    /// | 2xx | accepted | delivered |
    /// | 1xx, 3xx, 408, 425, 429, 5xx | retry (honouring `Retry-After`) | the collector is busy, moving or down |
    /// | 400, 413, 422 | split | something in the request: find which events |
    /// | 401, 403, 404, 405, 407, 411, 414, 415, any other 4xx | refused request | about the request, not its events |
    ///
    /// Spool applies three rules before this table that no format changes: a
    /// gzip body answered 400 or 415 is sent once more uncompressed (with
    /// ``UploadCompression/automatic``); a 1xx or 3xx keeps the events; only
    /// a 2xx is delivery.
    @_spi(FormatAuthoring) public static func standard(for response: UploadResponse) -> UploadVerdict {
        let status = response.status
        if (200..<300).contains(status) { return .accepted }  // the common case: no reason to build
        let reason = describe(response)
        switch status {
        case 400, 413, 422: return .split(reason: reason)
        case 408, 425, 429: return .retry(reason: reason, retryAfter: response.retryAfter)
        case 400..<500: return .refusedRequest(reason: reason, retryAfter: response.retryAfter)
        default: return .retry(reason: reason, retryAfter: response.retryAfter)
        }
    }

    /// `HTTP <status>: <start of the body>`, for reasons.
    @_spi(FormatAuthoring) public static func describe(_ response: UploadResponse) -> String {
        "HTTP \(response.status)" + (response.message().map { ": " + $0 } ?? "")
    }
}
