import Foundation

/// Called once per dispatch, on any thread.
public typealias DispatchCompletionHandler = @Sendable (DispatchOutcome) -> Void

/// Sends batches of events to a collector, with the method names of
/// Optimizely's `OPTEventDispatcher` but **not its contract**.
///
/// Spool builds each batch from its log (Spool's JSON body, uncompressed) and
/// hands it to the dispatcher; the outcome decides what happens to the
/// events: 2xx removes them, 5xx and transport failures keep them for a
/// retry with backoff, 413 splits the batch, 400 isolates and dead-letters
/// the events the collector rejects.
///
/// How it differs from Optimizely's dispatcher, so that code ported from it
/// does what it should:
/// - **One call is one built batch, not one event.** Spool has already
///   queued, batched and stored the events; do not queue or batch them again.
/// - **Success means delivered.** Report `.response(status:…)` with the
///   collector's real HTTP status once it has answered. Optimizely's default
///   dispatcher reports success as soon as an event is queued, and its
///   sender treats any status as sent; here a 2xx deletes the events for
///   good, and anything else keeps or dead-letters them.
/// - **The completion handler is called exactly once**, for every call.
///   Optimizely's protocol lets a batching dispatcher skip it; Spool waits
///   for it (at most its dispatch timeout, then retries the batch).
/// - The outcome is ``DispatchOutcome``, not `OptimizelyResult<Data>`.
///
/// To keep Spool's formats, gzip and headers and change only how bytes
/// travel, give ``DefaultEventDispatcher`` a transport of your own instead:
/// it gets the finished request (`UploadTransport`, in the transport
/// authors' interface: `@_spi(TransportAuthoring) import Spool`).
///
/// ## Implementation requirements
///
/// - `dispatchEvent` POSTs `event.body` unchanged to `event.url` with
///   `content-type: application/json` (or delivers it by other means with the
///   same meaning), and calls `completionHandler` exactly once, from any
///   thread, with what happened. Never report success for a response that
///   was not 2xx: Spool deletes what it believes was delivered.
/// - It must not block the calling thread for the duration of the request.
///   Spool calls it from a task of its own, never on its database queue, one
///   batch at a time, and prepares the next batch meanwhile.
/// - `flushEvents()` asks for queued events to go out now. Spool's engine
///   calls it as a signal only; a dispatcher without its own queue can ignore it.
public protocol EventDispatcher: Sendable {
    /// Sends `event` and calls `completionHandler` exactly once with the
    /// outcome (see the requirements above).
    func dispatchEvent(event: EventForDispatch, completionHandler: DispatchCompletionHandler?)
    /// Asks for queued events to go out now; a signal only.
    func flushEvents()
}
