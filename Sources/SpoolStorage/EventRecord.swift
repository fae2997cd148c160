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
    /// A dead letter put back for the uploader: other consumers pass over it.
    package let uploaderOnly: Bool
    /// The message type: track, screen, identify, group or alias.
    package var type: String = EventRecord.track
    /// A group's id, or an alias's previous id.
    package var target: String?
    /// The `identities` row it was recorded for (nil before identities were
    /// kept), and its id (also when only the id was read).
    package var identity: IdentityRow?
    package var identityID: Int64?
    /// The `contexts` row in force, if a context was set.
    package var contextID: Int64?
    /// The property values its occurrence added to `event_history_values`
    /// (set on the rows a commit builds; nil when read back from the log).
    package var historyValues: HistoryValues?

    package init(
        seq: Int64, id: String, name: String, parametersJSON: String, recordedAt: Double, sessionID: String?,
        priority: Bool, uploaderOnly: Bool = false
    ) {
        self.seq = seq
        self.id = id
        self.name = name
        self.parametersJSON = parametersJSON
        self.recordedAt = recordedAt
        self.sessionID = sessionID
        self.priority = priority
        self.uploaderOnly = uploaderOnly
    }

    /// The columns `init(_:)` reads, in order, from ``fromEvents``.
    package static let columns = """
        e.seq, e.id, e.name, e.parameters, e.recorded_at, e.session_id, e.priority, e.uploader_only, e.type, \
        e.target, e.context_id, i.id, i.anonymous_id, i.user_id, i.traits, i.created_at, e.sealed, i.sealed
        """
    /// The log joined with each event's identity.
    package static let fromEvents = "FROM events AS e LEFT JOIN identities AS i ON i.id = e.identity_id"
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
    /// The identity and context in force when the event was accepted: one
    /// reference, shared by every event until either changes.
    package var stamps: RecordStamps?
    /// A message other than a `track`: its type and target; nil for a
    /// `track` (unless the history keeps some of its values), so a buffered
    /// `track` carries one reference, not two strings.
    private var message: MessageFields?

    /// The message type (``track`` and the others of `events.type`).
    package var type: String { message?.type ?? Self.track }
    /// A group's id, or an alias's previous id.
    package var target: String? { message?.target }
    /// The identity in force when the event was accepted.
    package var identity: IdentityStamp? { stamps?.identity }
    /// The context in force when the event was accepted.
    package var context: ContextStamp? { stamps?.context }
    /// The property values the history keeps with this occurrence
    /// (`event_history_values`): those a registered survey declared.
    package var historyValues: HistoryValues? { message?.historyValues }

    /// Keeps `values` with the occurrence this event adds to the history.
    package mutating func keep(_ values: HistoryValues) {
        message = MessageFields(type: type, target: target, historyValues: values)
    }

    package static let track = "track"

    package init(
        name: String, parametersJSON: String, recordedAt: Double, sessionID: String? = nil,
        priority: Bool = false, addsToHistory: Bool = false, type: String = EventRecord.track, target: String? = nil,
        stamps: RecordStamps? = nil
    ) {
        self.name = name
        self.parametersJSON = parametersJSON
        self.recordedAt = recordedAt
        self.sessionID = sessionID
        self.priority = priority
        self.addsToHistory = addsToHistory
        self.stamps = stamps
        if type != Self.track || target != nil { message = MessageFields(type: type, target: target) }
    }

    /// What the write buffer counts for this event: its name and encoded
    /// parameters, plus what each buffered event costs besides (about 100
    /// bytes: its place in the buffer and the string headers).
    package var bufferedBytes: Int { name.utf8.count + parametersJSON.utf8.count + 100 }
    /// What it counts for against the queue's byte bound.
    var boundBytes: Int { Connection.boundBytes(name: name, parametersJSON: parametersJSON, target: target) }
}

/// A receipt for one append: its place in the acceptance order and its id.
package struct AppendReceipt: Sendable, Hashable {
    package let ticket: UInt64
    package let id: String
}
