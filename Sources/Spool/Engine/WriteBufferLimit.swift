import SpoolStorage

/// How much may wait in memory for the writer: accepted events that are not
/// committed yet.
///
/// While commits succeed the writer drains the buffer in group commits. While
/// they keep failing (a full disk), events stay buffered for the next attempt
/// and, past this bound, `record` refuses new ones with
/// ``SpoolError/bufferFull(events:bytes:)`` — the events already accepted are
/// never dropped to make room.
public struct WriteBufferLimit: Sendable, Hashable {
    /// The most events buffered.
    public var maximumEvents: Int
    /// The most bytes buffered, counting each event's name and encoded
    /// parameters.
    public var maximumBytes: Int

    /// 8,192 events or 2 MiB, whichever comes first: two commit groups, so
    /// the writer never waits for work, while a burst of any size holds a
    /// few megabytes.
    public static let `default` = WriteBufferLimit(maximumEvents: 8_192, maximumBytes: 2 << 20)

    /// A bound of `maximumEvents` events or `maximumBytes` bytes, whichever
    /// is reached first. Values below 1 count as 1.
    public init(maximumEvents: Int, maximumBytes: Int) {
        self.maximumEvents = max(1, maximumEvents)
        self.maximumBytes = max(1, maximumBytes)
    }

    var limits: EventLog.Limits { EventLog.Limits(events: maximumEvents, bytes: maximumBytes) }
}
