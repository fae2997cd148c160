import Foundation

/// One request for a dispatcher to send: where to, and the exact JSON body.
public struct EventForDispatch: Sendable, Hashable {
    /// The collector endpoint.
    public let url: URL
    /// The JSON body. Send it as given: a dispatcher must not modify it.
    public let body: Data
    /// How many events the body carries (a batch built by Spool), for logs.
    public let eventCount: Int

    public init(url: URL, body: Data, eventCount: Int = 1) {
        self.url = url
        self.body = body
        self.eventCount = eventCount
    }
}

/// How one dispatch ended.
public enum DispatchOutcome: Sendable, Hashable {
    /// The collector answered with this HTTP status (any status, 2xx or not).
    /// `retryAfter` is the parsed `Retry-After` header, in seconds; `message`
    /// is the start of the response body, for dead-letter reasons.
    case response(status: Int, retryAfter: TimeInterval?, message: String?)
    /// No answer: offline, connection refused or reset, timed out.
    case transportFailure(String)

    /// True for a 2xx response.
    public var isSuccess: Bool {
        if case .response(let status, _, _) = self { return (200..<300).contains(status) }
        return false
    }
}

/// The batching rules a dispatcher asks the engine's uploader to follow.
///
/// ``DefaultEventDispatcher`` adopts it; a custom dispatcher may too, and
/// otherwise gets `DefaultEventDispatcher`'s defaults.
public protocol BatchingPolicy: Sendable {
    /// Events per request (at least 1).
    var batchSize: Int { get }
    /// Seconds between timed flushes; 0 sends as soon as events are committed.
    var timerInterval: TimeInterval { get }
    /// The most events kept for upload; past it the oldest give way.
    var maxQueueSize: Int { get }
}

/// Called once per dispatch, on any thread.
public typealias DispatchCompletionHandler = @Sendable (DispatchOutcome) -> Void

/// Sends batches of events to a collector.
///
/// Spool builds each batch from its log and hands it to the dispatcher; the
/// outcome decides what happens to the events: 2xx removes them, 5xx and
/// transport failures keep them for a retry with backoff, 413 splits the
/// batch, 400 isolates and dead-letters the events the collector rejects.
///
/// ## Implementation requirements
///
/// - `dispatchEvent` POSTs `event.body` unchanged to `event.url` with
///   `content-type: application/json` (or delivers it by other means with the
///   same meaning), and calls `completionHandler` exactly once, from any
///   thread, with what happened. Never report success for a response that
///   was not 2xx: Spool deletes what it believes was delivered.
/// - It must not block the calling thread for the duration of the request.
/// - `flushEvents()` asks for queued events to go out now. Spool's engine
///   calls it as a signal only; a dispatcher without its own queue can ignore it.
public protocol EventDispatcher: Sendable {
    func dispatchEvent(event: EventForDispatch, completionHandler: DispatchCompletionHandler?)
    func flushEvents()
}
