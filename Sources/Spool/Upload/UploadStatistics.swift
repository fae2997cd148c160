import Foundation

/// Counters a user can read to see what the uploader did.
public struct UploadStatistics: Sendable, Hashable {
    /// Events waiting for upload.
    public var pending: Int
    /// Events the queue bound dropped before they could be uploaded.
    public var dropped: Int
    /// Events the count bound dropped, ever, before every consumer had them
    /// (``EngineConfiguration/maximumRetainedEvents``). Read from the
    /// database: every process sharing the
    /// file counts here.
    public var droppedOverCount: Int
    /// Events the byte bound dropped, ever
    /// (``EngineConfiguration/maximumQueueBytes``).
    public var droppedOverBytes: Int
    /// Events the age bound dropped, ever
    /// (``EngineConfiguration/maximumEventAge``).
    public var droppedOverAge: Int
    /// Events the collector refused on their own, now in the `dead_letters`
    /// table (``EventEngine/requeueDeadLetters(_:)`` puts them back).
    public var deadLettered: Int
    /// Dead letters removed by ``DeadLetterLimits`` (count and age), ever.
    public var deadLettersEvicted: Int
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
    /// Why uploading is held back, while it is: the collector refused the
    /// requests themselves (`HTTP 401: …` after a key rotation, a 404 during
    /// a deploy), not their events. The events are kept and retried with
    /// backoff; nil once a request is accepted.
    public var heldBack: String?
    /// False once the collector was found not to read gzip bodies (a gzip
    /// request answered 400 or 415 and taken uncompressed): requests to it
    /// are not compressed, in this and later launches.
    public var compresses: Bool
    /// True while the system says there is no network path (Apple
    /// platforms), or only a metered one with ``UploadPolicy/unmeteredOnly``:
    /// automatic uploads wait for one instead of spending retries, and start
    /// at once when it comes. Without a path an explicit
    /// ``EventEngine/flush()`` still tries.
    public var waitingForNetwork: Bool
    /// True while uploads are paused (``EventEngine/pauseUploads()``), by
    /// this process or another using the file: events are kept and nothing
    /// is sent until ``EventEngine/resumeUploads()``.
    public var paused: Bool
}
