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
/// - `timestamp` is seconds since 1970 (multiply by 1000 for milliseconds).
///   Dates in `parameters` arrive as ISO 8601 strings with milliseconds, UTC.
public protocol EventListener: AnyObject, Sendable {
    func onEventRecorded(_ name: String, parameters: [String: EventValue], timestamp: TimeInterval)
}
