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

/// One delivered event, as registrations and streams receive it.
public struct RecordedEvent: Sendable, Hashable {
    /// The stable UUIDv7 the collector deduplicates on (empty for `.ready`).
    public let id: String
    /// The log position (0 for `.ready`).
    public let seq: Int64
    public let name: String
    /// The parameters, dates as ISO 8601 strings.
    public let parameters: [String: EventValue]
    /// Seconds since 1970.
    public let timestamp: TimeInterval
    public let sessionID: String?

    public init(
        id: String, seq: Int64, name: String, parameters: [String: EventValue], timestamp: TimeInterval,
        sessionID: String?
    ) {
        self.id = id
        self.seq = seq
        self.name = name
        self.parameters = parameters
        self.timestamp = timestamp
        self.sessionID = sessionID
    }
}

/// What an `on(_:_:)` registration listens to.
public struct EventTopic: Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    enum Kind: Hashable, Sendable {
        case named(String)
        case everyEvent
        case ready
    }

    let kind: Kind

    /// Events with this name.
    public static func named(_ name: String) -> EventTopic { EventTopic(kind: .named(name)) }
    /// Every delivered event.
    public static let everyEvent = EventTopic(kind: .everyEvent)
    /// Fires once when `start()` settles; replayed at once to late subscribers.
    public static let ready = EventTopic(kind: .ready)

    public init(stringLiteral name: String) {
        kind = .named(name)
    }

    init(kind: Kind) {
        self.kind = kind
    }

    public var description: String {
        switch kind {
        case .named(let name): return name
        case .everyEvent: return "<every event>"
        case .ready: return "<ready>"
        }
    }
}
