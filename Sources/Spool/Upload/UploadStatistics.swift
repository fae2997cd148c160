import Foundation

/// Counters a user can read to see what the uploader did.
public struct UploadStatistics: Sendable, Hashable {
    /// Events waiting for upload.
    public var pending: Int
    /// Events the queue bound dropped before they could be uploaded.
    public var dropped: Int
    /// Events the collector refused for good (see the `dead_letters` table).
    public var deadLettered: Int
    /// Events the collector accepted (this process).
    public var uploaded: Int
    /// Requests sent (this process).
    public var requests: Int
    /// Requests that failed (this process): no answer, a status that was
    /// not 2xx, or a 2xx that refused some of its events.
    public var failedRequests: Int
    /// The last failure, if the last attempt failed.
    public var lastFailure: String?
    /// Seconds until the next automatic retry, when backing off.
    public var nextRetryIn: TimeInterval?
}
