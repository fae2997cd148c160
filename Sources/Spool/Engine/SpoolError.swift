import SpoolStorage

/// Every failure Spool's API throws, with messages a user can act on.
///
/// One error type: match on its cases, and on the reason a case carries
/// (``EventProblem``, ``SurveyProblem``, or the SQLite result code of a
/// ``SQLiteFailure``), as the <doc:DurabilityModel> article's tables list them.
///
/// ```swift
/// do {
///     try await engine.recordDurably("checkout_done")
/// } catch SpoolError.stillBuffered(_, let reason) where reason.resultCode == .full {
///     // The disk is full: the event is kept in memory and committed later.
/// } catch SpoolError.invalidEvent(let problem) {
///     // Rejected before it was stored: fix the call.
///     print(problem)
/// }
/// ```
public enum SpoolError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The database file could not be opened or created (missing or unwritable
    /// directory, permissions). The file is left as it was.
    case cannotOpen(path: String, reason: String)
    /// The file exists but is not a SQLite database. It is never overwritten.
    ///
    /// ``EventEngine/start()`` throws it only with
    /// ``EngineConfiguration/salvagesDamagedDatabase`` off; otherwise the
    /// file is set aside and a fresh one started (see ``SalvageReport``).
    case notADatabase(path: String)
    /// The database was migrated by a newer Spool (a newer version of the
    /// app) to a schema this library does not know: its `version` is above
    /// `latestKnown`. The file is left untouched.
    ///
    /// ``EventEngine/start()`` throws it only with
    /// ``EngineConfiguration/salvagesDamagedDatabase`` off, or when the
    /// salvage cannot finish; otherwise the events and the other rows in the
    /// tables and columns this library knows are copied into a fresh file,
    /// the newer file is set aside beside it, and the queued events are
    /// uploaded (see ``SalvageReport``).
    case schemaTooNew(path: String, version: Int, latestKnown: Int)
    /// The file's schema is in a state no migration explains: its
    /// `PRAGMA user_version` says `version`, but its tables say otherwise
    /// (`reason` says how — for example `user_version` lowered below tables
    /// that exist). Nothing was changed.
    ///
    /// ``EventEngine/start()`` throws it only with
    /// ``EngineConfiguration/salvagesDamagedDatabase`` off; otherwise the
    /// file is salvaged.
    case schemaUnexplained(path: String, version: Int, reason: String)
    /// The file opens, but cannot be trusted as it is (`reason` says why):
    /// it ends in the middle of a page (it was cut short), or its log lacks
    /// events it says were committed. Nothing was changed.
    ///
    /// ``EventEngine/start()`` throws it only with
    /// ``EngineConfiguration/salvagesDamagedDatabase`` off; otherwise the
    /// file is salvaged.
    case damaged(path: String, reason: String)
    /// A setting that must hold could not be applied (for example WAL mode).
    case pragmaNotApplied(path: String, pragma: String, expected: String, actual: String)
    /// The SQLite library the app links cannot run Spool: too old for the
    /// schema's STRICT tables (3.37.0 or newer is needed) or built without
    /// the JSON functions. Nothing was touched; `start()` can be retried
    /// only with another library.
    case unsupportedSQLite(version: String, reason: String)
    /// The database is suspended while the app is in the background (so
    /// iOS can suspend the app without a lock on the file), and the call
    /// could not wait for it (for example ``EventEngine/uploadStatistics()``
    /// in the background). Nothing was done; call again once the app is
    /// active. Recording and `recordDurably` do not fail this way, and
    /// `flush()` and `requeueDeadLetters()` only when the system grants no
    /// background time, the device is locked with complete file
    /// protection, or the time granted runs out before the upload is done
    /// (its events stay queued): otherwise their work runs in a short
    /// background window.
    case suspended
    /// The engine or database was closed.
    case closed
    /// The engine was used before ``EventEngine/start()`` where that is not allowed.
    case notStarted
    /// ``EventEngine/start()`` was called a second time; the engine goes on
    /// as the first call started it.
    case alreadyStarted
    /// A call that uploads or reads the upload queue (``EventEngine/flush()``,
    /// ``EventEngine/uploadStatistics()``, ``EventEngine/pauseUploads()``…)
    /// on an engine whose configuration has no
    /// ``EngineConfiguration/collectorURL``: nothing is uploaded.
    case notUploading
    /// ``EventEngine/reencryptAll()`` on an engine without
    /// ``EngineConfiguration/encryption``. Nothing was changed.
    case notEncrypted
    /// A ``DefaultEventDispatcher``'s `backingStore` and `dataStoreName`
    /// ask for a database at `requested`, which is neither
    /// ``EngineConfiguration/database`` (`configured`) nor their default:
    /// set the location in one place (`database`, or
    /// ``EngineConfiguration/uploading(to:dispatcher:in:)``). `start()`
    /// throws it before touching any file.
    case conflictingDatabaseLocation(configured: String, requested: String)
    /// The event was rejected before it was stored; nothing else was affected.
    case invalidEvent(EventProblem)
    /// A survey was refused (``SurveyCenter/register(_:)``,
    /// ``SurveyCenter/evaluate(_:)``); nothing was registered or recorded.
    case invalidSurvey(SurveyProblem)
    /// A lifecycle event was marked, or an explanation asked, for a survey
    /// id that is not registered. Nothing was recorded.
    case unknownSurvey(String)
    /// ``EventEngine/flush()`` did not upload everything: the collector
    /// could not be reached or answered with a retryable status, uploads are
    /// paused or held back, or another process holds the upload (`reason`
    /// says which). The events stay queued and are retried with backoff.
    case uploadDeferred(reason: String)
    /// SQLite failed (`failure` carries its result code): while opening the
    /// file, or refusing one event for good (a constraint, a value too
    /// big). A failed commit of an accepted event is ``stillBuffered(eventID:reason:)``
    /// instead.
    case sqlite(SQLiteFailure)
    /// ``EventEngine/eraseAllData()`` erased the event before it was stored:
    /// it waited for a session, or for a commit on a full disk.
    case erased
    /// The commit holding this accepted event failed (the disk is full, an
    /// I/O error). The event is still buffered and Spool commits it when the
    /// database accepts writes again: do not record it again.
    case stillBuffered(eventID: String, reason: SQLiteFailure)
    /// The event was not accepted: this many events (and bytes) already wait
    /// for the writer, the configured bound (``EngineConfiguration/writeBuffer``),
    /// and commits keep failing (a full disk) or the writer made no room
    /// within 2 seconds (another process holding the file's write lock).
    case bufferFull(events: Int, bytes: Int)
    /// ``EventEngine/eraseAllData()`` erased the database, but these files
    /// set aside beside it (copies of damaged, newer or unrecognised
    /// databases, and their companions) could not be deleted: they may still
    /// hold the user's data. Delete them, or call `eraseAllData()` again once
    /// they can be.
    case erasureIncomplete(paths: [String])
    /// An ``EncryptionKey`` was made from bytes that are not an AES-256 key,
    /// or with an id that is empty or too long.
    case invalidEncryptionKey(String)
    /// The ``EncryptionKeyProvider`` threw, or gave no usable key, when
    /// ``EventEngine/start()`` or ``EventEngine/reencryptAll()`` asked it
    /// for the current key (a Keychain locked before the first unlock, for
    /// example). Nothing was written.
    case encryptionKeyUnavailable(String)
    /// The database holds sealed values and the engine has no
    /// ``EngineConfiguration/encryption``: start it with the key provider
    /// the file was written with. Nothing was changed.
    case sealedRowsWithoutEncryption(path: String)

    /// A sentence for logs and alerts, naming the path or the event involved.
    public var description: String {
        switch self {
        case .cannotOpen(let path, let reason):
            return "Cannot open the Spool database at \(path): \(reason)"
        case .notADatabase(let path):
            return "\(path) is not a SQLite database; Spool left it untouched"
        case .schemaTooNew(let path, let version, let latestKnown):
            return
                "The database at \(path) has schema version \(version), newer than the \(latestKnown) this library knows; it was left untouched"
        case .schemaUnexplained(let path, let version, let reason):
            return
                "The database at \(path) says schema version \(version), which does not explain its tables (\(reason)); it was left untouched"
        case .damaged(let path, let reason):
            return "The database at \(path) is damaged: \(reason); it was left untouched"
        case .pragmaNotApplied(let path, let pragma, let expected, let actual):
            return "PRAGMA \(pragma) on \(path) is \(actual), expected \(expected)"
        case .unsupportedSQLite(let version, let reason):
            return "The linked SQLite \(version) cannot run Spool: \(reason)"
        case .suspended:
            return "The Spool database is suspended while the app is in the background"
        case .closed:
            return "The Spool engine is closed"
        case .notStarted:
            return "The Spool engine has not been started"
        case .alreadyStarted:
            return "start() was already called"
        case .notUploading:
            return "No collectorURL is configured, so nothing is uploaded"
        case .notEncrypted:
            return "reencryptAll() needs EngineConfiguration.encryption"
        case .conflictingDatabaseLocation(let configured, let requested):
            return
                "The dispatcher's backingStore and dataStoreName ask for \(requested), but database is \(configured): "
                + "set the location in one place (database, or EngineConfiguration.uploading(to:dispatcher:in:))"
        case .invalidEvent(let reason):
            return "Invalid event: \(reason)"
        case .invalidSurvey(let reason):
            return "Invalid survey: \(reason)"
        case .unknownSurvey(let id):
            return "No survey with id \(id.debugDescription) is registered"
        case .uploadDeferred(let reason):
            return "Upload failed, events kept for a retry: \(reason)"
        case .sqlite(let failure):
            return failure.description
        case .erased:
            return "The event was erased before it was stored"
        case .stillBuffered(let id, let reason):
            return
                "Event \(id) is accepted but not committed yet (\(reason)); it stays buffered and is retried — do not record it again"
        case .bufferFull(let events, let bytes):
            return
                "The event was not accepted: \(events) events (\(bytes) bytes) already wait for the writer, which is failing or blocked"
        case .erasureIncomplete(let paths):
            return
                "The database was erased, but \(paths.count) files set aside beside it could not be deleted and may still hold user data: \(paths.joined(separator: ", "))"
        case .invalidEncryptionKey(let reason):
            return "Not an encryption key: \(reason)"
        case .encryptionKeyUnavailable(let reason):
            return "The encryption key provider gave no current key: \(reason)"
        case .sealedRowsWithoutEncryption(let path):
            return "The database at \(path) holds encrypted values; configure the encryption it was written with"
        }
    }
}

// MARK: - From the storage layer

extension SpoolError {
    /// The storage layer's own failures and SQLite's as the public ones;
    /// anything else (a task's cancellation) passes through unchanged.
    static func bridge(_ error: any Error) -> any Error {
        if let sqlite = error as? SQLiteError { return SpoolError.sqlite(SQLiteFailure(sqlite)) }
        if let sealing = error as? SealingError {
            switch sealing {
            case .keyUnavailable(let reason), .cipherFailed(let reason):
                return SpoolError.encryptionKeyUnavailable(reason)
            }
        }
        guard let storage = error as? StorageError else { return error }
        switch storage {
        case .cannotOpen(let path, let reason): return SpoolError.cannotOpen(path: path, reason: reason)
        case .notADatabase(let path): return SpoolError.notADatabase(path: path)
        case .schemaTooNew(let path, let version, let latestKnown):
            return SpoolError.schemaTooNew(path: path, version: version, latestKnown: latestKnown)
        case .schemaUnexplained(let path, let version, let reason):
            return SpoolError.schemaUnexplained(path: path, version: version, reason: reason)
        case .damaged(let path, let reason): return SpoolError.damaged(path: path, reason: reason)
        case .pragmaNotApplied(let path, let pragma, let expected, let actual):
            return SpoolError.pragmaNotApplied(path: path, pragma: pragma, expected: expected, actual: actual)
        case .unsupportedSQLite(let version, let reason):
            return SpoolError.unsupportedSQLite(version: version, reason: reason)
        case .suspended: return SpoolError.suspended
        case .erased: return SpoolError.erased
        case .closed: return SpoolError.closed
        case .bufferFull(let events, let bytes): return SpoolError.bufferFull(events: events, bytes: bytes)
        case .notYetCommitted(let error): return SpoolError.sqlite(SQLiteFailure(error))
        }
    }

    /// Runs `body`, turning storage failures into ``SpoolError``s.
    static func bridging<T>(_ body: () throws -> T) throws -> T {
        do { return try body() } catch { throw bridge(error) }
    }

    /// Runs `body`, turning storage failures into ``SpoolError``s.
    static func bridgingAsync<T>(_ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch { throw bridge(error) }
    }
}
