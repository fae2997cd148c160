import Foundation
import SpoolStorage

/// One delivered event, as registrations and streams receive it.
///
/// It carries what an ``EventListener`` gets, plus the event's stable id, its
/// position in the log and its session.
public struct RecordedEvent: Sendable, Hashable {
    /// The stable UUIDv7 the collector deduplicates on (empty for `.ready`).
    public let id: String
    /// The log position (0 for `.ready`).
    public let seq: Int64
    /// The name the event was recorded with (`ready` for `.ready`).
    public let name: String
    /// The parameters, read back from the JSON that was stored: what was
    /// recorded, with dates as ISO 8601 strings.
    public let parameters: [String: EventValue]
    /// When `record` accepted the event, in seconds since 1970.
    public let timestamp: TimeInterval
    /// The session the event was recorded in; nil for events stored without
    /// one (recorded before `close()` with no session running) and for
    /// `.ready`.
    public let sessionID: String?
    /// The message type (`track` for ``EventEngine/record(_:parameters:)``).
    public let type: EventType
    /// The anonymous id in force when the event was accepted (nil for events
    /// stored before identities were kept, and for `.ready`).
    public let anonymousId: String?
    /// The user id in force when the event was accepted, if any.
    public let userId: String?
    /// A `group`'s id, or an `alias`'s previous id.
    public let target: String?

    /// Creates an event value, for tests and for forwarding events you built
    /// yourself; Spool creates the ones it delivers.
    public init(
        id: String, seq: Int64, name: String, parameters: [String: EventValue], timestamp: TimeInterval,
        sessionID: String?, type: EventType = .track, anonymousId: String? = nil, userId: String? = nil,
        target: String? = nil
    ) {
        self.type = type
        self.anonymousId = anonymousId
        self.userId = userId
        self.target = target
        self.id = id
        self.seq = seq
        self.name = name
        self.parameters = parameters
        self.timestamp = timestamp
        self.sessionID = sessionID
    }

    /// A committed event with the parameters as delivered.
    init(_ stored: StoredEvent, parameters: [String: EventValue]) {
        self.init(
            id: stored.id, seq: stored.seq, name: stored.name, parameters: parameters, timestamp: stored.recordedAt,
            sessionID: stored.sessionID, type: EventType(rawValue: stored.type) ?? .track,
            anonymousId: stored.identity?.anonymousID, userId: stored.identity?.userID, target: stored.target)
    }

    /// What `.ready` subscribers receive.
    static func ready(at timestamp: TimeInterval) -> RecordedEvent {
        RecordedEvent(id: "", seq: 0, name: "ready", parameters: [:], timestamp: timestamp, sessionID: nil)
    }
}
