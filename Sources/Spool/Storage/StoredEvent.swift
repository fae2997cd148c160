/// One row of the event log.
@_spi(Internals) public struct StoredEvent: Sendable, Hashable {
    /// The log position: increases with every accepted append, never reused.
    public let seq: Int64
    /// The stable UUIDv7 a collector deduplicates on.
    public let id: String
    public let name: String
    /// The parameters as canonical JSON text (an object), exactly as stored
    /// and uploaded.
    public let parametersJSON: String
    /// Seconds since 1970.
    public let recordedAt: Double
    public let sessionID: String?
    /// True for events that bypass the per-session limit.
    public let priority: Bool
}

/// What an append puts in the log; the id and position come from the log.
@_spi(Internals) public struct EventRecord: Sendable {
    public var name: String
    public var parametersJSON: String
    public var recordedAt: Double
    public var sessionID: String?
    public var priority: Bool = false
    /// Also add the event to the user's event history (survey rules).
    public var addsToHistory: Bool = false
    /// The parameters the JSON was encoded from, handed to the commit handler
    /// so listeners need not parse the JSON again. Not stored.
    var parameters: [String: EventValue]?

    public init(
        name: String, parametersJSON: String, recordedAt: Double, sessionID: String? = nil,
        priority: Bool = false, addsToHistory: Bool = false
    ) {
        self.init(
            name: name, parametersJSON: parametersJSON, recordedAt: recordedAt, sessionID: sessionID,
            priority: priority, addsToHistory: addsToHistory, parameters: nil)
    }

    init(
        name: String, parametersJSON: String, recordedAt: Double, sessionID: String? = nil,
        priority: Bool = false, addsToHistory: Bool = false, parameters: [String: EventValue]?
    ) {
        self.parameters = parameters
        self.name = name
        self.parametersJSON = parametersJSON
        self.recordedAt = recordedAt
        self.sessionID = sessionID
        self.priority = priority
        self.addsToHistory = addsToHistory
    }
}

/// A committed event as the commit handler sees it.
struct CommittedEvent: Sendable {
    let stored: StoredEvent
    /// The in-memory parameters, when the appender supplied them.
    let parameters: [String: EventValue]?
}

/// A receipt for one append: its place in the acceptance order and its id.
@_spi(Internals) public struct AppendReceipt: Sendable, Hashable {
    public let ticket: UInt64
    public let id: String
}
