/// What `record` did with an event that passed validation.
public enum RecordOutcome: Sendable, Hashable {
    /// Accepted and appended to the log under this event id.
    case recorded(id: String)
    /// Accepted and held in order until a session starts.
    case queuedUntilSessionStart
    /// Dropped: the user opted out of data collection.
    case droppedOptedOut
    /// Dropped: the engine is disabled.
    case droppedDisabled
    /// Dropped: the session's event limit was reached.
    case droppedSessionLimit
    /// Dropped while waiting for a session: more events waited than the log
    /// keeps, and newer ones pushed it out (the oldest give way).
    case droppedWhileWaitingForSession
    /// Dropped by a middleware (``EventEngine/addMiddleware(_:)``), with the
    /// reason it gave, or because it threw.
    case droppedByMiddleware(reason: String)

    /// True when the event will be stored.
    public var isAccepted: Bool {
        switch self {
        case .recorded, .queuedUntilSessionStart: return true
        default: return false
        }
    }
}
