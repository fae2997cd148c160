import Foundation
import SpoolStorage

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

    /// A committed event with the parameters as delivered.
    init(_ stored: StoredEvent, parameters: [String: EventValue]) {
        self.init(
            id: stored.id, seq: stored.seq, name: stored.name, parameters: parameters, timestamp: stored.recordedAt,
            sessionID: stored.sessionID)
    }

    /// What `.ready` subscribers receive.
    static func ready(at timestamp: TimeInterval) -> RecordedEvent {
        RecordedEvent(id: "", seq: 0, name: "ready", parameters: [:], timestamp: timestamp, sessionID: nil)
    }
}
