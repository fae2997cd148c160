import SpoolStorage

/// How much may wait in memory for the writer: accepted events that are not
/// committed yet.
///
/// Only the writer makes the buffer smaller (it takes the whole buffer at the
/// start of each group commit), so what a burst of `record` calls can hold is
/// bounded here. At the bound:
///
/// - while commits succeed, `record` waits for the writer to take the buffer
///   — normally a few milliseconds, the time of one group commit — and no
///   event is lost;
/// - while commits keep failing (a full disk), or when the writer makes no
///   room within 2 seconds (another process holding the file's write lock),
///   `record` refuses the new event with
///   ``SpoolError/bufferFull(events:bytes:)`` instead of growing memory. The
///   events already accepted are never dropped to make room.
///
/// Code running on Spool's database queue (a custom dispatcher's callback)
/// never waits: while commits succeed, its events are buffered past the
/// bound.
///
/// ```swift
/// var configuration = EngineConfiguration(database: .file(url))
/// // An app extension with little memory: a smaller bound.
/// configuration.writeBuffer = WriteBufferLimit(maximumEvents: 1_024, maximumBytes: 256 << 10)
/// ```
public struct WriteBufferLimit: Sendable, Hashable {
    /// The most events buffered.
    public var maximumEvents: Int
    /// The most bytes buffered, counting each event's name and encoded
    /// parameters plus about 100 bytes per event for its place in the buffer.
    /// An event larger than this is buffered alone, once the writer has
    /// taken what came before it.
    public var maximumBytes: Int

    /// 8,192 events or 1 MiB, whichever comes first: room for the writer's
    /// next group while it commits one (about 3,500 events of ten
    /// parameters), so it never waits for work, while a burst of any size
    /// holds a few megabytes. ``EngineConfiguration/writeBuffer``'s default
    /// (hence `@usableFromInline`).
    @usableFromInline static let `default` = WriteBufferLimit(
        maximumEvents: EventLog.Limits.standard.events, maximumBytes: EventLog.Limits.standard.bytes)

    /// A bound of `maximumEvents` events or `maximumBytes` bytes, whichever
    /// is reached first. Values below 1 count as 1.
    public init(maximumEvents: Int, maximumBytes: Int) {
        self.maximumEvents = max(1, maximumEvents)
        self.maximumBytes = max(1, maximumBytes)
    }

    var limits: EventLog.Limits { EventLog.Limits(events: maximumEvents, bytes: maximumBytes) }
}
