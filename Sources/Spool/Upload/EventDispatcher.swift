import Foundation

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
