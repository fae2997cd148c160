import SpoolStorage

/// The gates every recorded event passes, and the session it joins, as a
/// value: consent, the enabled switch, the per-session limit (priority events
/// bypass it), the current session, and the bounded queue of events waiting
/// for one.
///
/// The engine keeps one under its lock and asks it what to do with each
/// event; nothing here blocks, calls out or touches the log, so the rules are
/// tested on their own (`SessionGatesTests`).
struct SessionGates {
    typealias Waiting = EventEngine.Waiting

    var consent: Bool
    var enabled: Bool
    /// Non-priority events allowed per session (nil: no limit).
    let sessionEventLimit: Int?
    /// The most events held while no session runs.
    let waitingLimit: Int
    /// The current session's id.
    private(set) var sessionID: String?
    /// Non-priority events counted toward the current (or upcoming) session.
    private(set) var sessionCount = 0
    /// Events accepted while no session runs, in order.
    private(set) var waiting: [Waiting] = []
    /// Events that gave way in `waiting`, since the engine was created.
    private(set) var waitingDropped = 0

    init(consent: Bool, enabled: Bool, sessionEventLimit: Int?, waitingLimit: Int) {
        self.consent = consent
        self.enabled = enabled
        self.sessionEventLimit = sessionEventLimit
        self.waitingLimit = max(1, waitingLimit)
    }

    /// What becomes of an event.
    enum Decision: Equatable {
        /// A gate drops it; it is never stored.
        case drop(RecordOutcome)
        /// No session (or no log yet): it waits in memory for one.
        case wait
        /// Append it to the log in this session.
        case append(sessionID: String)
    }

    /// The gates, in order, for an event (`priority` bypasses the session
    /// limit); `hasLog` says whether the engine could append it now.
    func decide(priority: Bool, hasLog: Bool) -> Decision {
        guard enabled else { return .drop(.droppedDisabled) }
        guard consent else { return .drop(.droppedOptedOut) }
        if !priority, let limit = sessionEventLimit, sessionCount >= limit { return .drop(.droppedSessionLimit) }
        guard hasLog, let sessionID else { return .wait }
        return .append(sessionID: sessionID)
    }

    /// An event was accepted into the session (appended or waiting): it
    /// counts toward the limit unless it is a priority event.
    mutating func count(priority: Bool) {
        if !priority && sessionEventLimit != nil { sessionCount += 1 }
    }

    /// Keeps `entry` until a session starts, counted toward it. Past the
    /// bound the oldest waiting event gives way and is returned.
    mutating func wait(_ entry: Waiting, priority: Bool) -> Waiting? {
        count(priority: priority)
        var displaced: Waiting?
        if waiting.count >= waitingLimit {
            displaced = waiting.removeFirst()
            waitingDropped += 1
        }
        waiting.append(entry)
        return displaced
    }

    /// When the oldest event waiting for a session was recorded.
    var earliestWaiting: Double? {
        waiting.lazy.map(\.record.recordedAt).min()
    }

    /// Starts session `id` (ending the current one, whose count starts
    /// over). Returns the events that waited for it, each carrying `id`,
    /// to append in order.
    mutating func startSession(_ id: String) -> [Waiting] {
        if sessionID != nil { sessionCount = 0 }
        sessionID = id
        return takeWaiting().map { entry in
            var entry = entry
            entry.record.sessionID = id
            return entry
        }
    }

    /// Ends the current session: events wait for the next one and count
    /// toward it.
    mutating func endSession() {
        sessionID = nil
        sessionCount = 0
    }

    /// Everything waiting for a session, which no longer waits.
    mutating func takeWaiting() -> [Waiting] {
        defer { waiting.removeAll() }
        return waiting
    }
}
