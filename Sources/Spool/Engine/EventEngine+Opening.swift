import Foundation
import SpoolStorage

// MARK: - Opening the database: checks, the high-water mark, salvage

extension EventEngine {
    /// The database ``start()`` opened, and what it found there.
    struct OpenedDatabase: Sendable {
        let database: DatabaseQueue
        /// The high-water mark, raised after each commit; nil in memory.
        let mark: CommitMark?
        /// What the salvage did, when the file could not be used.
        let salvage: SalvageReport?
        /// Events committed to this file that it no longer holds: the
        /// high-water mark beside it is past its head (a lost WAL).
        let missingCommitted: Int64
        /// Events the file's own head says were committed and its log lacks
        /// (found with salvage off; with it on the file is salvaged).
        let missingInFile: Int64
    }

    /// Opens the database on a thread of its own: the file checks, the wait
    /// for another process's open lock, migrations and a salvage are
    /// blocking file I/O, which must hold neither the caller's executor
    /// (often the main actor) nor a thread of the cooperative pool (a few
    /// engines starting at once would hold them all).
    static func openDatabase(
        _ configuration: EngineConfiguration, sealer: RowSealer?, undecryptable: @escaping @Sendable (Int) -> Void
    ) async throws
        -> OpenedDatabase
    {
        // The result crosses threads under a lock: what the opening thread
        // built is then visible to the task that goes on with it.
        let opened = Protected<Result<OpenedDatabase, any Error>?>(nil)
        await withCheckedContinuation { continuation in
            let recorded = DispatchSemaphore(value: 0)
            let thread = Thread {
                // Named once start() has recorded the thread: Linux's
                // Foundation applies a name only to the thread it recorded,
                // and ignores one set before start().
                recorded.wait()
                Thread.current.name = "spool.open"
                let result = Result {
                    try SpoolError.bridging { try open(configuration, sealer: sealer, undecryptable: undecryptable) }
                }
                opened.withLock { $0 = result }
                continuation.resume()
            }
            thread.qualityOfService = .userInitiated
            thread.start()
            recorded.signal()
        }
        guard let result = opened.withLock({ $0 }) else {
            preconditionFailure("the opening thread resumes only after it set the result")
        }
        return try result.get()
    }

    /// Creates the directory that holds the database file at `url`, with its
    /// parents, when it is missing: a fresh app has no Application Support
    /// folder until something makes it.
    ///
    /// - Throws: ``SpoolError/cannotOpen(path:reason:)`` naming the file, when
    ///   the directory cannot be made (a file in its place, a folder that
    ///   refuses new entries).
    private static func createDirectory(containing url: URL) throws {
        let directory = url.deletingLastPathComponent()
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: directory.path, isDirectory: &isDirectory), isDirectory.boolValue {
            return
        }
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        } catch {
            // The system's own words for the cause (errno's), where it gives one.
            let cause = (error as NSError).userInfo[NSUnderlyingErrorKey] as? NSError
            let reason =
                cause.flatMap { $0.domain == NSPOSIXErrorDomain ? String(cString: strerror(Int32($0.code))) : nil }
                ?? error.localizedDescription
            throw SpoolError.cannotOpen(path: url.path, reason: "its directory cannot be created: \(reason)")
        }
    }

    private static func open(
        _ configuration: EngineConfiguration, sealer: RowSealer?, undecryptable: @escaping @Sendable (Int) -> Void
    ) throws -> OpenedDatabase {
        // The current key first: without it nothing is opened or written.
        try sealer?.refreshCurrentKey()
        let options = configuration.connectionOptions(sealer: sealer, undecryptable: undecryptable)
        guard case .file(let url) = configuration.database else {
            let database = try DatabaseQueue(path: configuration.database.path, options: options)
            return OpenedDatabase(database: database, mark: nil, salvage: nil, missingCommitted: 0, missingInFile: 0)
        }
        let path = url.path
        try createDirectory(containing: url)
        // The mark's file is also the lock that keeps two processes from
        // salvaging (or one from opening while another salvages) at once.
        let mark = StoreMark(databasePath: path)
        mark?.lock()
        defer { mark?.unlock() }
        DamagedCopies(databasePath: path).deleteDamaged(
            before: Date(timeIntervalSince1970: configuration.clock.now - max(0, configuration.damagedCopyRetention)))
        let found = mark?.read()
        let salvages = configuration.salvagesDamagedDatabase
        do {
            var (database, shape) = try openChecked(path, options, salvaging: salvages)
            var missing: Int64 = 0
            if let identity = shape.identity, let found, found.identity == identity, found.head > shape.head {
                // A lost WAL: its positions are not handed out again.
                missing = found.head - shape.head
                do {
                    try database.sync { try $0.closeUpPositions(toHead: found.head) }
                } catch {
                    database.close()
                    throw error
                }
                shape.newest = shape.newest.map { $0 + missing }
                shape.head = found.head
            }
            database.closesWithIt(mark)
            return OpenedDatabase(
                database: database, mark: CommitMark(mark, shape), salvage: nil, missingCommitted: missing,
                missingInFile: shape.missingEvents)
        } catch let damage
            where salvages && (StorageError.meansDamage(damage) || StorageError.meansNewerSchema(damage))
        {
            // A newer schema is no damage, but this version can use no more
            // of it than the tables and columns it knows: it is copied the
            // same way and set aside as `.newer-`.
            let kind: DamagedCopies.Kind = StorageError.meansNewerSchema(damage) ? .newer : .damaged
            let date = Date(timeIntervalSince1970: configuration.clock.now)
            let outcome: SalvageOutcome
            do {
                outcome = try Salvager.salvage(path: path, options: options, mark: found, date: date, kind: kind)
            } catch {
                // The salvage could not finish (a directory that cannot be
                // written, a full disk): the file is where it was, and the
                // app learns what made it unusable.
                throw damage
            }
            let (database, shape) = try openChecked(path, options, salvaging: false)
            database.closesWithIt(mark)
            return OpenedDatabase(
                database: database, mark: CommitMark(mark, shape),
                salvage: SalvageReport(outcome, reason: reason(damage), date: date), missingCommitted: 0,
                missingInFile: 0)
        }
    }

    /// Opens and migrates the database at `path` and reads the ends of its
    /// log. Throws ``StorageError/damaged(path:reason:)`` for an event past
    /// the head (every commit would fail) and, when `salvaging`, for a log
    /// that lacks events it says were committed.
    private static func openChecked(_ path: String, _ options: ConnectionOptions, salvaging: Bool) throws
        -> (DatabaseQueue, LogShape)
    {
        let database = try DatabaseQueue(path: path, options: options)
        do {
            let shape = try database.sync { connection in
                if connection.sealer != nil {
                    try connection.noteSealing(now: database.clock.now)
                    try connection.sealPendingTargets()
                } else if try connection.holdsSealedRows() {
                    throw SpoolError.sealedRowsWithoutEncryption(path: path)
                }
                return try connection.logShape()
            }
            if shape.eventsPastHead {
                throw StorageError.damaged(
                    path: path,
                    reason: "events sit past log_head (\(shape.head)): new events would be given their positions")
            }
            if salvaging && shape.missingEvents > 0 {
                throw StorageError.damaged(
                    path: path,
                    reason:
                        "log_head says \(shape.head) events were committed, but the newest is \(shape.newest ?? 0): \(shape.missingEvents) are missing"
                )
            }
            return (database, shape)
        } catch {
            database.close()
            throw error
        }
    }

    /// Why a file could not be used, for the report.
    static func reason(_ error: any Error) -> String {
        switch error {
        case StorageError.notADatabase: return "it is not a SQLite database"
        case StorageError.damaged(_, let reason): return reason
        case StorageError.schemaUnexplained(_, let version, let reason):
            return "its schema version \(version) does not explain its tables: \(reason)"
        case StorageError.schemaTooNew(_, let version, let latestKnown):
            return
                "its schema version \(version) is newer than \(latestKnown), the newest this version of Spool knows (a newer version of the app wrote it); the tables and columns it does not know stay in the set-aside file"
        case let error as SQLiteError: return "SQLite reports it damaged: \(error.message)"
        default: return "\(error)"
        }
    }

    /// Reports what opening found: a salvage, or committed events missing.
    func reportOpening(_ opened: OpenedDatabase) {
        if let salvage = opened.salvage {
            state.withLock { $0.salvage = salvage }
            diagnosticsCenter.report(.storeSalvaged, eventCount: salvage.lost.events, "\(salvage)")
        }
        if opened.missingCommitted > 0 {
            diagnosticsCenter.report(
                .committedEventsMissing, eventCount: Int(clamping: opened.missingCommitted),
                "\(opened.missingCommitted) events committed to the database file are gone: the high-water mark beside it is past its log's head (its WAL was lost, or an older copy of it restored); some may have been delivered or uploaded before"
            )
        }
        if opened.missingInFile > 0 {
            diagnosticsCenter.report(
                .committedEventsMissing, eventCount: Int(clamping: opened.missingInFile),
                "\(opened.missingInFile) events the database's log_head says were committed are not in its events table"
            )
        }
    }

    /// What the last ``start()`` did with a database file it could not use,
    /// or nil when the file was fine (or the database is in memory). See
    /// ``SalvageReport``.
    public var salvageReport: SalvageReport? {
        state.withLock { $0.salvage }
    }

    /// Deletes every copy set aside at the database's path, recognised or
    /// not (they may hold the user's data), for an erasure.
    ///
    /// - Parameter alsoLeft: other files the erasure could not delete.
    /// - Throws: ``SpoolError/erasureIncomplete(paths:)`` naming the files
    ///   that could not be deleted.
    func deleteSetAsideCopies(alsoLeft: [String] = []) throws {
        guard case .file(let url) = configuration.database else { return }
        let left = DamagedCopies(databasePath: url.path).deleteAll() + alsoLeft
        if !left.isEmpty { throw SpoolError.erasureIncomplete(paths: left) }
    }
}

/// The high-water mark of the file the engine has open: set to the file's
/// head at open, raised after each commit, and set again for the new file
/// after a salvage while running.
final class CommitMark: Sendable {
    let mark: StoreMark
    /// The open file's identity (``Connection/fileIdentity()``).
    private let identity: Protected<UInt64>

    /// Sets the mark to the file's head now; nil when there is no mark or
    /// the file has no identity.
    init?(_ mark: StoreMark?, _ shape: LogShape) {
        guard let mark, let identity = shape.identity else { return nil }
        self.mark = mark
        self.identity = Protected(identity)
        mark.write(StoreMark.Value(identity: identity, head: shape.head))
    }

    /// After a commit: raises the mark to `head`.
    ///
    /// - Returns: false when the mark names another file: another process
    ///   salvaged the file and put a fresh one at the path.
    func committed(_ head: Int64) -> Bool {
        mark.advance(to: head, identity: identity.withLock { $0 })
    }

    /// After the file was replaced: the mark names the new file, at its head.
    func reset(_ shape: LogShape) {
        guard let new = shape.identity else { return }
        identity.withLock { $0 = new }
        mark.write(StoreMark.Value(identity: new, head: shape.head))
    }
}
