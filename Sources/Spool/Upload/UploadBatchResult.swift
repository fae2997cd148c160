import Dispatch
import Foundation
import SpoolStorage

/// What came of one upload request: which events it carried, what the
/// collector answered, and what Spool did with the events.
///
/// Every request the uploader sends produces one, splits and uncompressed
/// retries included; they reach ``EngineConfiguration/uploadResultHandler``
/// and ``EventEngine/uploadResults()`` on the delivery queue, and the last
/// 1,000 (at most 20,000 events between them) are kept in the
/// `upload_batches` table with the ids of their events
/// (`upload_batches_readable` at the `sqlite3` prompt), so "was event X
/// sent, and what did the collector say?" has an answer after a restart.
/// The rows are written 16 requests at a time and when a flush ends: a
/// crash can leave out the last 15 requests' rows, never their events.
public struct UploadBatchResult: Sendable, Hashable {
    /// What Spool did with the request's events.
    public enum Outcome: String, Sendable, Hashable, CaseIterable {
        /// The collector took them: they are done.
        case accepted
        /// No answer, or an answer that asks to try later (5xx, 408, 429, a
        /// redirect not followed): the events stay queued and are retried
        /// with backoff. Also a gzip body refused and sent again uncompressed.
        case retried
        /// The collector refused the request itself (401, 403, 404 …, or a
        /// refusal that singles out no event): the events stay queued and
        /// uploading is held back.
        case heldBack
        /// Something in the request was refused (400, 413, 422): its halves
        /// are sent on their own to find the events at fault.
        case bisected
        /// Refused while its neighbours were accepted: the events went to
        /// `dead_letters`.
        case deadLettered
        /// The collector answered per event (a Kafka REST proxy's offsets):
        /// some were taken, some dead-lettered or kept for a retry.
        case settledPerEvent
    }

    /// The id of the first event in the request (in log order).
    public let firstEventID: String
    /// The id of the last event in the request.
    public let lastEventID: String
    /// How many events the request carried.
    public let eventCount: Int
    /// The HTTP status, or nil when no answer came.
    public let status: Int?
    /// Why no answer came (a timeout, a refused connection, a header
    /// provider that threw), or the collector's reason for a refusal.
    public let detail: String?
    /// What Spool did with the events.
    public let outcome: Outcome
    /// From sending to the answer.
    public let duration: TimeInterval
    /// Whether the body was gzipped.
    public let compressed: Bool
    /// When the request was sent.
    public let sentAt: Date
}

/// Where the uploader's results go: the configured handler and the
/// ``EventEngine/uploadResults()`` streams, on the delivery queue.
final class UploadResultCenter: Sendable {
    private let handler: (@Sendable (UploadBatchResult) -> Void)?
    private let queue: DispatchQueue
    private let streams = SubscriptionRegistry<AllResults, UploadBatchResult>()

    private struct AllResults: Hashable, Sendable {}

    init(handler: (@Sendable (UploadBatchResult) -> Void)?, queue: DispatchQueue) {
        self.handler = handler
        self.queue = queue
    }

    func publish(_ result: UploadBatchResult) {
        // Nobody to tell: no hop to the delivery queue for every request. A
        // stream opened from now on gets the results from now on.
        guard handler != nil || !streams.isEmpty else { return }
        queue.async { [handler, streams] in
            handler?(result)
            streams.send(result, to: AllResults())
        }
    }

    func stream() -> AsyncStream<UploadBatchResult> {
        streams.stream(AllResults())
    }

    func finishAll() {
        streams.finishAll()
    }
}
