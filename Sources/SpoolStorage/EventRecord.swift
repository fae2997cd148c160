/// One row of the event log.
package struct StoredEvent: Sendable, Hashable {
    /// The log position: increases with every accepted append, never reused.
    package let seq: Int64
    /// The stable UUIDv7 a collector deduplicates on.
    package let id: String
    package let name: String
    /// The parameters as canonical JSON text (an object), exactly as stored
    /// and uploaded.
    package let parametersJSON: String
    /// Seconds since 1970.
    package let recordedAt: Double
    package let sessionID: String?
    /// True for events that bypass the per-session limit.
    package let priority: Bool

    package init(
        seq: Int64, id: String, name: String, parametersJSON: String, recordedAt: Double, sessionID: String?,
        priority: Bool
    ) {
        self.seq = seq
        self.id = id
        self.name = name
        self.parametersJSON = parametersJSON
        self.recordedAt = recordedAt
        self.sessionID = sessionID
        self.priority = priority
    }
}

/// What an append puts in the log; the id and position come from the log.
package struct EventRecord: Sendable {
    package var name: String
    package var parametersJSON: String
    package var recordedAt: Double
    package var sessionID: String?
    package var priority: Bool
    /// Also add the event to the user's event history (survey rules).
    package var addsToHistory: Bool
    /// Whatever the appender wants handed back with the committed event (the
    /// engine keeps the in-memory parameters here, so listeners need not parse
    /// the JSON again). Never stored; the log does not look inside.
    package var attachment: (any Sendable)?

    package init(
        name: String, parametersJSON: String, recordedAt: Double, sessionID: String? = nil,
        priority: Bool = false, addsToHistory: Bool = false, attachment: (any Sendable)? = nil
    ) {
        self.name = name
        self.parametersJSON = parametersJSON
        self.recordedAt = recordedAt
        self.sessionID = sessionID
        self.priority = priority
        self.addsToHistory = addsToHistory
        self.attachment = attachment
    }
}

/// A committed event as the commit handler sees it.
package struct CommittedEvent: Sendable {
    package let stored: StoredEvent
    /// The appender's attachment, as given to ``EventRecord``.
    package let attachment: (any Sendable)?

    package init(stored: StoredEvent, attachment: (any Sendable)?) {
        self.stored = stored
        self.attachment = attachment
    }
}

/// A receipt for one append: its place in the acceptance order and its id.
package struct AppendReceipt: Sendable, Hashable {
    package let ticket: UInt64
    package let id: String
}
