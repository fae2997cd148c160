import Foundation

/// An object that observes every event Spool delivers.
///
/// Register with ``EventObservers/addObserver(_:)``. Spool holds listeners
/// weakly: keep a strong reference for as long as you want events.
///
/// ## Implementation requirements
///
/// - `onEventRecorded` is called on Spool's one internal serial delivery queue,
///   never on the main thread or the caller of `record`. Hop to the main queue
///   yourself to touch UI.
/// - Every listener is called from that same queue, in log order. A slow
///   listener delays the listeners after it and the events that follow: return
///   quickly and move expensive work to your own queue.
/// - Recording an event from inside the callback is allowed: it is delivered
///   later, to every listener, and counts toward the per-session limit.
/// - The event's `timestamp` is seconds since 1970 (multiply by 1000 for
///   milliseconds). Dates in its `parameters` arrive as ISO 8601 strings with
///   milliseconds, UTC.
/// - The type must be `Sendable`: Spool calls it from its own queue. A class
///   with mutable state protects it with a lock, or confines it to a queue
///   of its own.
///
/// ```swift
/// final class AnalyticsForwarder: EventListener {
///     func onEventRecorded(_ event: RecordedEvent) {
///         // On Spool's delivery queue, in record order, after the commit.
///     }
/// }
/// ```
public protocol EventListener: AnyObject, Sendable {
    /// Called once for each delivered event, on Spool's delivery queue, after
    /// the event is committed: its name, its parameters read back from the
    /// JSON that was stored (what was recorded, with dates as ISO 8601
    /// strings), when `record` accepted it (seconds since 1970), its id,
    /// message type and the identity it was recorded for.
    func onEventRecorded(_ event: RecordedEvent)
}
