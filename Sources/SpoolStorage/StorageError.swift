/// Failures of the storage layer that are not SQLite's own result codes.
///
/// The engine turns these into its public `SpoolError`; the storage layer
/// knows nothing above it.
package enum StorageError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The database file could not be opened or created.
    case cannotOpen(path: String, reason: String)
    /// The file exists but is not a SQLite database. It is never overwritten.
    case notADatabase(path: String)
    /// The file's schema is newer than the migrations this library embeds.
    case schemaTooNew(path: String, version: Int, latestKnown: Int)
    /// The file's schema is in a state no migration explains: `user_version`
    /// says `version`, but the tables say otherwise (it was lowered below
    /// tables that exist, or a migration step found its work already done).
    case schemaUnexplained(path: String, version: Int, reason: String)
    /// The file opens but cannot be trusted as it is: it ends in the middle
    /// of a page, or its log lacks events it says were committed.
    case damaged(path: String, reason: String)
    /// A setting that must hold could not be applied (for example WAL mode).
    case pragmaNotApplied(path: String, pragma: String, expected: String, actual: String)
    /// The linked SQLite library cannot run Spool's schema; no file was touched.
    case unsupportedSQLite(version: String, reason: String)
    /// The database is suspended (the app is in the background); the work
    /// was not done.
    case suspended
    /// The event was erased before it could be committed.
    case erased
    /// The log or database was closed.
    case closed
    /// The commit holding the event failed (disk full, I/O error); the event
    /// is still buffered and is retried. Appending it again would store it twice.
    case notYetCommitted(SQLiteError)
    /// An append was refused: this many events and bytes wait for the writer
    /// (the buffer's bound) while commits keep failing, or the writer made no
    /// room within ``EventLog/maximumWaitForRoom``.
    case bufferFull(events: Int, bytes: Int)

    package var description: String {
        switch self {
        case .cannotOpen(let path, let reason): return "cannot open \(path): \(reason)"
        case .notADatabase(let path): return "\(path) is not a SQLite database"
        case .schemaTooNew(let path, let version, let latestKnown):
            return "\(path) has schema version \(version), newer than \(latestKnown)"
        case .schemaUnexplained(let path, let version, let reason):
            return "\(path) says schema version \(version), which does not explain its tables: \(reason)"
        case .damaged(let path, let reason): return "\(path) is damaged: \(reason)"
        case .pragmaNotApplied(let path, let pragma, let expected, let actual):
            return "PRAGMA \(pragma) on \(path) is \(actual), expected \(expected)"
        case .unsupportedSQLite(let version, let reason): return "SQLite \(version) is not supported: \(reason)"
        case .suspended: return "suspended"
        case .erased: return "erased"
        case .closed: return "closed"
        case .notYetCommitted(let error): return "not committed yet (\(error)); still buffered"
        case .bufferFull(let events, let bytes): return "buffer full: \(events) events, \(bytes) bytes"
        }
    }
}

extension StorageError {
    /// Whether `error` means the file itself is damaged: not a database, a
    /// page SQLite reports malformed, a read meeting a value longer than
    /// SQLite's length limit (garbage that parses as a cell), a file cut
    /// short, a log missing what it committed, or a schema no migration
    /// explains. A newer schema, a location that cannot be written, a busy
    /// file, a full disk, an I/O error, or a value too long to write are not
    /// damage.
    package static func meansDamage(_ error: any Error) -> Bool {
        switch error {
        case StorageError.notADatabase, StorageError.damaged, StorageError.schemaUnexplained: return true
        case let error as SQLiteError:
            return error.resultCode == .corrupt || error.resultCode == .notADatabase
                || (error.resultCode == .tooBig && error.whileReading)
        default: return false
        }
    }

    /// Whether `error` says the file's schema is newer than this library's
    /// (a newer version of the app migrated it): no damage, but a file
    /// ``Salvager`` can copy into this version's schema.
    package static func meansNewerSchema(_ error: any Error) -> Bool {
        if case StorageError.schemaTooNew = error { return true }
        return false
    }
}
