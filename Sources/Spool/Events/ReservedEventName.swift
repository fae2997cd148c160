/// Event names Spool itself records or treats specially.
enum ReservedEventName {
    /// The heartbeat: stored and uploaded, never delivered to listeners and
    /// never a survey trigger.
    static let heartbeat = "flush_event"
    /// Recorded when a session starts; delivered like any event.
    static let sessionStart = "session_start"

    /// Whether an event of this name is added to the event history: every
    /// one but the heartbeat.
    static func entersHistory(_ name: String) -> Bool {
        name != heartbeat
    }
}
