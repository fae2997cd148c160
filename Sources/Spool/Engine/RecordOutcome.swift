/// What `record` did with an event that passed validation.
public enum RecordOutcome: Sendable, Hashable {
    /// Accepted and appended to the log under this event id.
    case recorded(id: String)
    /// Accepted and held in order until a session starts (L2).
    case queuedUntilSessionStart
    /// Dropped: the user opted out of data collection (L3).
    case droppedOptedOut
    /// Dropped: the engine is disabled (L3).
    case droppedDisabled
    /// Dropped: the session's event limit was reached (L12).
    case droppedSessionLimit

    /// True when the event will be stored.
    public var isAccepted: Bool {
        switch self {
        case .recorded, .queuedUntilSessionStart: return true
        default: return false
        }
    }
}
