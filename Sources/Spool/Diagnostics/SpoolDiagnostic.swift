import Foundation

/// Something Spool could not tell a caller directly: a failure that means
/// lost or stalled data, or the recovery from one.
///
/// Every diagnostic reaches ``EngineConfiguration/diagnosticHandler`` and
/// ``EventEngine/diagnostics()`` on Spool's delivery queue, in order with the
/// events listeners receive, and is counted in
/// ``EventEngine/diagnosticCounts``.
///
/// ```swift
/// var configuration = EngineConfiguration(database: .file(url))
/// configuration.diagnosticHandler = { diagnostic in
///     if diagnostic.kind == .commitFailed { logger.error("\(diagnostic)") }
/// }
/// ```
public struct SpoolDiagnostic: Sendable, CustomStringConvertible {
    /// What happened.
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        /// A group commit failed (disk full, I/O error). The events stay
        /// buffered, in order, and are retried with backoff.
        case commitFailed
        /// Commits succeed again after failing.
        case commitRecovered
        /// The database refused one event for good (a constraint, a value too
        /// big); the events around it were committed.
        case eventRejected
        /// `record` refused an event (``SpoolError/bufferFull(events:bytes:)``):
        /// the write buffer was at its bound while commits were failing, or
        /// the writer made no room within 2 seconds.
        case recordRefused
        /// `close()` could not commit these events; they are lost when the
        /// process ends.
        case uncommittedAtClose
        /// A durable listener's position could not be saved: after a restart
        /// it receives these events again (at least once).
        case positionSaveFailed
        /// A durable listener could not be attached or read its backlog; it is
        /// tried again on the next event (or the next time it is added). Also
        /// reported when its lease could not be renewed, released or
        /// forgotten (a lease left behind expires by itself).
        case durableListenerStalled
        /// Another process holds this durable listener id; this process
        /// delivers nothing to it until that process lets go.
        case durableListenerHeldElsewhere
        /// Survey conditions could not be evaluated for these events; no
        /// trigger was reported for them.
        case surveyEvaluationFailed
        /// `session_start` could not be recorded.
        case sessionStartFailed
        /// An upload attempt failed; the events stay queued and are retried.
        /// Also reported while the upload queue cannot be discarded after
        /// consent was withdrawn (uploads wait until it is), and when the
        /// upload lease cannot be released at close (another process sharing
        /// the file uploads once it expires).
        case uploadFailed
        /// The collector refused these events on their own (its answer
        /// singled them out); they are in `dead_letters`.
        case eventsDeadLettered
        /// The collector refused a request itself (401, 403, 404 …, or a
        /// 400 that singles out no event): the events are kept, and
        /// uploading is held back with backoff until it takes them. The
        /// message names the status.
        case uploadHeldBack
        /// The collector does not read gzip bodies: a gzip request was
        /// answered 400 or 415 and the same batch was taken uncompressed.
        /// Requests to that URL are not compressed from now on, in later
        /// launches too.
        case compressionTurnedOff
        /// Dead letters were removed by their bounds (``DeadLetterLimits``).
        case deadLettersEvicted
        /// The queue's bounds (count, bytes, age) made its oldest events
        /// give way before every consumer had them; the message says how
        /// many per bound. Durable listeners also get `onMissed`.
        case eventsDropped
        /// The database file could not give space back after the queue
        /// drained (an I/O error); it stays larger until the next drain.
        /// Another process reading the file is no failure: Spool tries again
        /// a few seconds later.
        case fileNotShrunk
        /// The database files' data-protection class or backup exclusion
        /// could not be set (Apple platforms); they keep the app's defaults.
        case filePolicyNotApplied
        /// `start()` found the database file unusable (not a database,
        /// malformed, cut short, missing events it committed, a schema no
        /// migration explains, a schema newer than this library's), or a
        /// read while running met a malformed page, and salvaged it: the file
        /// was set aside and a fresh one started with every row that could be
        /// read (for a newer schema, in the tables and columns this library
        /// knows).
        /// `eventCount` is the events known lost; ``EventEngine/salvageReport``
        /// has the details.
        case storeSalvaged
        /// A read or commit while running met a malformed page, and the
        /// salvage tried then failed; the error says why. The damaged file
        /// stays in use: what meets the damage keeps failing, each where it
        /// happens, and the next of them tries the salvage again, at most
        /// once a minute.
        case salvageFailed
        /// Another process salvaged the database file while this one had
        /// it open: it moved the file aside and put a fresh one at its
        /// path. This process noticed at its next commit, or when it met the
        /// damage itself, and goes on with the fresh file, without a
        /// salvage of its own. What it committed to the old file from when
        /// that salvage began until it noticed is in the set-aside copy, not
        /// in the fresh file (the commit that noticed at most, unless the
        /// salvage was still copying).
        case storeSalvagedElsewhere
        /// At `start()`, the database held fewer events than were committed
        /// to it: its WAL was lost after a crash (or an older copy of the
        /// file was restored), as the high-water mark kept beside it shows,
        /// or its log lacks events its `log_head` counts (with salvage off).
        /// `eventCount` is how many are gone; some may have been delivered
        /// or uploaded before they went. When the mark found them, their
        /// positions are not handed out again, and every consumer counts
        /// them as dropped.
        case committedEventsMissing
        /// The database's volume has less free space than
        /// ``EngineConfiguration/minimumFreeDiskSpace``: the file stops
        /// growing. The log keeps the events and bytes it holds, and each new one makes
        /// the oldest give way (counted as dropped by the consumers that had
        /// not finished it); recording goes on.
        case lowDiskSpace
        /// The database's volume has enough free space again: the configured
        /// bounds are back.
        case diskSpaceRecovered
        /// A middleware dropped an event (``MiddlewareDecision/drop(reason:)``);
        /// it was never stored. The message names the event and the reason.
        case eventDroppedByMiddleware
        /// A middleware threw: the event was dropped, never stored, so a
        /// failing scrubber cannot let it through unscrubbed.
        case middlewareFailed
        /// Sealed values would not open (``EngineConfiguration/encryption``:
        /// the key provider does not return their key, or their bytes were
        /// changed or moved to another row; or this engine has no
        /// encryption and another process seals the file). `eventCount` events moved to
        /// the dead letters with reason `undecryptable`, still sealed, and
        /// the queue goes on behind them; they are never sent as garbage.
        /// An identity that would not open counts too (its events then
        /// carry its anonymous id alone).
        case undecryptableRows
        /// Another process made a key current (``EventEngine/reencryptAll()``)
        /// and this process's key provider still gives the key in use, or
        /// failed: the
        /// values this process seals need the key it still uses, which the
        /// app must keep until this stops. Asked again a minute later.
        case encryptionKeyNotFollowed
        /// An erasure or ``EventEngine/reencryptAll()`` did not finish
        /// rebuilding the file (the app was killed during the call, or another
        /// process held the WAL for longer than the busy timeout), so bytes of
        /// the rows it deleted may still be in the `-wal` or in free pages;
        /// `start()` tried to finish it and failed, for the reason the error
        /// gives. The next start tries again; so does the next erasure.
        case erasureUnfinished
        /// An event waiting in memory for a session gave way to a newer one
        /// (what waits is bounded like the log; the oldest go first): it was
        /// never stored. ``DiagnosticCounts/events`` counts them since the
        /// engine was created.
        case droppedWhileWaitingForSession
    }

    /// What happened.
    public let kind: Kind
    /// How many events it concerns (0 when none in particular).
    public let eventCount: Int
    /// The underlying error, when there is one.
    public let error: (any Error)?
    /// A sentence for logs.
    public let message: String
    /// When it was reported.
    public let date: Date

    init(_ kind: Kind, eventCount: Int = 0, error: (any Error)? = nil, _ message: String, date: Date) {
        self.kind = kind
        self.eventCount = eventCount
        self.error = error
        self.message = message
        self.date = date
    }

    /// `[kind] message: error`, for logs.
    public var description: String {
        var text = "[\(kind.rawValue)] \(message)"
        if let error { text += ": \(error)" }
        return text
    }
}
