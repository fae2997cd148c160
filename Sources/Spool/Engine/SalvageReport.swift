import Foundation
import SpoolStorage

/// What ``EventEngine/start()`` did with a database file it could not use,
/// or what Spool did when a read while running met a damaged page.
///
/// A file that is not a SQLite database, that SQLite reports malformed
/// (`SQLITE_CORRUPT`) when it is opened and first read, that ends in the
/// middle of a page, whose log lacks events it says were committed, or whose
/// schema no migration explains (`user_version` lowered below tables that
/// exist) is not refused: `start()` copies every row it can still read —
/// events, consumers' positions, the event history, dead letters — row by
/// row, stepping over pages it cannot read, into a fresh file; moves the
/// damaged file and its `-wal` and `-shm` aside under a dated name in the
/// same directory; and starts on the fresh file. A
/// ``SpoolDiagnostic/Kind/storeSalvaged`` diagnostic and
/// ``EventEngine/salvageReport`` say what it recovered and what it knows it
/// lost.
///
/// A file a newer version of the app migrated to a schema this library does
/// not know (an app rolled back to an older version) is salvaged the same
/// way: the rows of the tables this library knows, in the columns it knows,
/// are copied into a fresh file at this library's schema, the newer file is
/// set aside whole, and the events it had queued are uploaded. ``reason``
/// names the file's schema version and the newest this library knows.
///
/// Recovered events keep their ids, order and contents. Their positions
/// (`seq`) close up over the lost ones, and each consumer's position moves
/// with them: the events a consumer had not finished and that were lost
/// count as dropped for it, so a durable listener hears of them through
/// `onMissed` and the uploader counts them in
/// ``UploadStatistics/dropped``.
///
/// `start()` reads only the ends of each table. A malformed page in the
/// middle of the log is found by the first read that reaches it (the
/// uploader, a durable listener catching up, a commit): that read fails, and
/// the file is salvaged then, the same way, while the app runs. The uploader
/// sends its batch in flight again, and each durable listener attached in
/// the process starts again from its position in the fresh file.
///
/// Another process that already had the damaged file open (an app
/// extension running at that moment) follows the fresh file at its next
/// commit, or when it meets the damage itself, without a salvage of its own
/// (a ``SpoolDiagnostic/Kind/storeSalvagedElsewhere`` diagnostic): what it
/// committed to the old file from when the salvage began until then is in
/// the set-aside copy only. Processes that open the database while a
/// salvage runs wait for it.
///
/// ``EngineConfiguration/salvagesDamagedDatabase`` turns this off: `start()`
/// then throws (``SpoolError/notADatabase(path:)``,
/// ``SpoolError/damaged(path:reason:)``,
/// ``SpoolError/schemaUnexplained(path:version:reason:)``, a
/// ``SpoolError/sqlite(_:)`` with `.corrupt`, or for a newer schema
/// ``SpoolError/schemaTooNew(path:version:latestKnown:)``) and leaves the
/// file untouched. A location that cannot be written, a busy file, a full
/// disk or an I/O error are not damage: `start()` throws for them either
/// way.
public struct SalvageReport: Sendable, Hashable, CustomStringConvertible {
    /// Row counts in Spool's tables.
    public struct Rows: Sendable, Hashable {
        /// Events in the log.
        public let events: Int
        /// Consumers' positions: the uploader's and each durable listener's.
        public let consumerPositions: Int
        /// Rows of the event history (each counts one name's occurrences in
        /// one millisecond).
        public let historyRows: Int
        /// Events the collector refused for good.
        public let deadLetters: Int
    }

    /// Why the file could not be used, in a sentence.
    public let reason: String
    /// Where the damaged file is now, with its `-wal` and `-shm` beside it
    /// (open it with `sqlite3` as it was).
    ///
    /// `<name>.damaged-<UTC date>.<extension>` when Spool found its own
    /// schema in it: every row it could read is in the fresh file, so the
    /// copy is kept only for inspection — the last one only, deleted after
    /// ``EngineConfiguration/damagedCopyRetention`` and by
    /// ``EventEngine/eraseAllData()``. `<name>.newer-<UTC date>.<extension>`
    /// when its schema was newer than this library's: it still holds the
    /// tables and columns this library does not know, and is kept the same
    /// way (one recognised copy in all, damaged or newer).
    /// `<name>.unrecognized-<UTC date>.<extension>` when it held no schema of
    /// Spool's (not SQLite, unreadable, or another program's database):
    /// nothing in it was copied, and only ``EventEngine/eraseAllData()``
    /// deletes it.
    public let damagedCopyPath: String
    /// Whether Spool deletes the damaged copy later (it recognised the file
    /// as its own).
    public let damagedCopyExpires: Bool
    /// When the file was salvaged.
    public let date: Date
    /// Rows copied into the fresh file.
    public let recovered: Rows
    /// Rows known to have been in the damaged file that could not be read:
    /// events between the consumers' positions and the log's head (or the
    /// high-water mark beside the file) that are missing, and history rows
    /// missing between the first and last found. Consumers' positions and
    /// dead letters lost cannot be counted (0 here).
    public let lost: Rows
    /// True when every page of Spool's tables could be read, so nothing was
    /// lost beyond what ``lost`` counts. False when some could not be read
    /// at all (the schema, the log's head, or runs of rows no position
    /// accounts for): more may be gone than ``lost`` says.
    public let isComplete: Bool

    init(_ outcome: SalvageOutcome, reason: String, date: Date) {
        self.reason = reason
        damagedCopyPath = outcome.copyPath
        damagedCopyExpires = outcome.recognized
        self.date = date
        recovered = Rows(outcome.recovered)
        lost = Rows(outcome.lost)
        isComplete = outcome.complete
    }

    /// One sentence for logs.
    public var description: String {
        var text =
            "the database could not be used (\(reason)); it was moved to \(damagedCopyPath) and a fresh file started with "
            + "\(recovered.events) events, \(recovered.consumerPositions) consumer positions, "
            + "\(recovered.historyRows) history rows and \(recovered.deadLetters) dead letters recovered; "
            + "\(lost.events) events and \(lost.historyRows) history rows known lost"
        if !isComplete { text += ", and parts of the file could not be read at all" }
        return text
    }
}

extension SalvageReport.Rows {
    init(_ rows: SalvageOutcome.Rows) {
        self.init(
            events: rows.events, consumerPositions: rows.consumers, historyRows: rows.history,
            deadLetters: rows.deadLetters)
    }
}
