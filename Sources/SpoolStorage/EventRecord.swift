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

    package init(
        name: String, parametersJSON: String, recordedAt: Double, sessionID: String? = nil,
        priority: Bool = false, addsToHistory: Bool = false
    ) {
        self.name = name
        self.parametersJSON = parametersJSON
        self.recordedAt = recordedAt
        self.sessionID = sessionID
        self.priority = priority
        self.addsToHistory = addsToHistory
    }

    /// What the write buffer counts for this event: its name and encoded
    /// parameters, plus what each buffered event costs besides (about 100
    /// bytes: its place in the buffer and the string headers).
    var bufferedBytes: Int { name.utf8.count + parametersJSON.utf8.count + 100 }
    /// What it counts for against the queue's byte bound.
    var boundBytes: Int { Connection.boundBytes(name: name, parametersJSON: parametersJSON) }
}

/// A receipt for one append: its place in the acceptance order and its id.
package struct AppendReceipt: Sendable, Hashable {
    package let ticket: UInt64
    package let id: String
}
