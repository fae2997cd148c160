import CSQLite
import Foundation

/// Options applied and checked when a connection opens.
package struct ConnectionOptions: Sendable {
    /// `PRAGMA synchronous = FULL` (an fsync per commit) instead of `NORMAL`.
    package var fullSynchronous = false
    /// How long a statement waits for another process's lock (an app
    /// extension sharing the file) before failing with `SQLITE_BUSY`.
    package var busyTimeoutMilliseconds: Int32 = 5_000
    /// Seals the personal values of the rows this connection writes, and
    /// opens them as it reads; nil writes and reads them as they are.
    package var sealer: RowSealer?
    /// Where the connection, and the ``DatabaseQueue`` that owns it, read
    /// the time: the timestamps rows are written with, and the queue's
    /// timers.
    package var clock: any SpoolClock
    /// Told how many rows whose sealed values would not open were set
    /// aside: with a sealer that lacks their key, or with none at all (a
    /// process without encryption on a file another process seals).
    package var onUndecryptable: (@Sendable (Int) -> Void)?

    package init(
        fullSynchronous: Bool = false, busyTimeoutMilliseconds: Int32 = 5_000, sealer: RowSealer? = nil,
        clock: any SpoolClock = SystemClock(), onUndecryptable: (@Sendable (Int) -> Void)? = nil
    ) {
        self.fullSynchronous = fullSynchronous
        self.busyTimeoutMilliseconds = busyTimeoutMilliseconds
        self.sealer = sealer
        self.clock = clock
        self.onUndecryptable = onUndecryptable
    }
}

/// One SQLite connection. Not Sendable: it is owned by one serial executor
/// (``DatabaseQueue``) and every `sqlite3_*` call happens there.
package final class Connection {
    /// The path as given (`:memory:` for an in-memory database).
    package let path: String
    package let handle: OpaquePointer
    private var statements: [String: Statement] = [:]
    /// The highest log head read on this connection (``requireWithinHead(_:)``).
    var headSeen: Int64 = 0
    /// Whether the file notes the current key (`sealing.key_id`, migration
    /// 0016): looked for until it does (``followNotedKey()``).
    var notesKeys = false
    private var isClosed = false
    /// Seals and opens personal values with the keys of
    /// ``ConnectionOptions/sealer``: this connection's own cipher state.
    package let sealing: SealingSession?
    /// Where the time written into rows comes from (``ConnectionOptions/clock``).
    package let clock: any SpoolClock
    /// How long a statement waits for another process's lock
    /// (``ConnectionOptions/busyTimeoutMilliseconds``).
    let busyTimeoutMilliseconds: Int32
    /// ``ConnectionOptions/onUndecryptable``.
    private let undecryptable: (@Sendable (Int) -> Void)?

    /// The keys personal values are sealed and opened with (``ConnectionOptions/sealer``).
    package var sealer: RowSealer? { sealing?.sealer }

    /// Tells ``ConnectionOptions/onUndecryptable`` that `count` rows would
    /// not open.
    func reportUndecryptable(_ count: Int) {
        if count > 0 { undecryptable?(count) }
    }

    /// The largest a WAL file stays after it starts over: above the size at
    /// which the writer restarts it.
    package static let walSizeLimitBytes = Checkpointer.restartBytes + (4 << 20)

    /// The path that opens a private in-memory database.
    package static let inMemoryPath = ":memory:"

    package var isInMemory: Bool { path == Self.inMemoryPath }

    /// Opens (creating with mode 0600 if missing) and configures the database.
    ///
    /// - Throws: ``StorageError/cannotOpen(path:reason:)`` for a missing or
    ///   unwritable directory, ``StorageError/notADatabase(path:)`` for a file
    ///   that is not SQLite, ``StorageError/pragmaNotApplied(path:pragma:expected:actual:)``
    ///   when WAL or another setting does not take. The file is never deleted
    ///   or overwritten.
    package init(path: String, options: ConnectionOptions) throws {
        self.path = path
        self.sealing = options.sealer.map(SealingSession.init)
        self.clock = options.clock
        self.busyTimeoutMilliseconds = options.busyTimeoutMilliseconds
        self.undecryptable = options.onUndecryptable
        if path != Self.inMemoryPath {
            try Connection.createFileIfMissing(path)
        }
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let code = sqlite3_open_v2(path, &handle, flags, nil)
        guard code == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(code))
            sqlite3_close_v2(handle)  // close the handle even when open fails
            throw StorageError.cannotOpen(path: path, reason: message)
        }
        self.handle = handle
        sqlite3_extended_result_codes(handle, 1)
        do {
            try configure(options)
        } catch {
            close()
            throw error
        }
    }

    /// Adopts a handle opened elsewhere, configured by nothing here: the
    /// salvage's reader of a damaged file, which must not write to it.
    package init(adopting handle: OpaquePointer, path: String) {
        self.path = path
        self.sealing = nil
        self.clock = SystemClock()
        self.busyTimeoutMilliseconds = 0
        self.undecryptable = nil
        self.handle = handle
        sqlite3_extended_result_codes(handle, 1)
    }

    deinit {
        close()
    }

    /// Creates a missing database file with mode 0600 (events can be personal
    /// data); SQLite gives the -wal and -shm files the same mode.
    private static func createFileIfMissing(_ path: String) throws {
        let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if fd >= 0 {
            Foundation.close(fd)
            return
        }
        let code = errno
        guard code == EEXIST else {
            throw StorageError.cannotOpen(path: path, reason: String(cString: strerror(code)))
        }
        // An existing file is tightened to 0600 too (it holds personal data),
        // with its -wal and -shm. A file this process does not own (EPERM)
        // is left as it is; nothing else can fail here that SQLite would not
        // report when it opens the file.
        for file in [path, path + "-wal", path + "-shm"] { _ = chmod(file, 0o600) }
    }

    private func configure(_ options: ConnectionOptions) throws {
        sqlite3_busy_timeout(handle, options.busyTimeoutMilliseconds)
        // The first read of the file: a file that is not SQLite fails here,
        // before anything could write to it.
        do {
            _ = try scalarInt("PRAGMA schema_version")
        } catch let error as SQLiteError where error.resultCode == .notADatabase {
            throw StorageError.notADatabase(path: path)
        }
        if !isInMemory, try isEmptyFile() {
            // Only a new, empty file takes these, and only before WAL: its page
            // size, and incremental auto-vacuum, which lets the file shrink
            // back in small steps after a drain (see `shrink`).
            try execute("PRAGMA page_size = \(Self.newFilePageSize)")
            try execute("PRAGMA auto_vacuum = INCREMENTAL")
        }
        if !isInMemory {
            let mode = try retryingWhileBusy(for: options.busyTimeoutMilliseconds) {
                try scalarString("PRAGMA journal_mode = WAL")
            }
            guard mode.lowercased() == "wal" else {
                throw StorageError.pragmaNotApplied(path: path, pragma: "journal_mode", expected: "wal", actual: mode)
            }
        }
        // The page cache's size, set again once the page size is settled:
        // when `PRAGMA page_size` changes a new file's page size, SQLite sizes
        // the new cache from its default (-2000, in KiB) with the previous
        // page size, 4 KiB: 500 pages, which at 16 KiB is four times the
        // memory (7.8 MB of cache instead of 2 in a 1M-event burst, while
        // `PRAGMA cache_size` still reads -2000). A file opened again is
        // sized right; setting it for every connection keeps one rule.
        try execute("PRAGMA cache_size = -\(Self.pageCacheKibibytes)")
        // Pragma arguments cannot be bound; these are our own constants.
        let level = options.fullSynchronous ? 2 : 1
        try execute(options.fullSynchronous ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL")
        let synchronous = try scalarInt("PRAGMA synchronous")
        guard synchronous == level else {
            throw StorageError.pragmaNotApplied(
                path: path, pragma: "synchronous", expected: "\(level)", actual: "\(synchronous)")
        }
        // After the WAL starts over, SQLite truncates its file to this size.
        // Above the size at which the writer restarts it (16 MiB), so under
        // continuous writes the file is overwritten in place: truncating it
        // to 4 MiB on every restart made the kernel free and allocate 12 MiB
        // of pages each time (a tenth of the writer's time in a burst). The
        // log truncates the file once the writer is idle again
        // (`EventLog.scheduleShrink`), so a burst does not keep its size.
        if !isInMemory { _ = try scalarInt("PRAGMA journal_size_limit = \(Self.walSizeLimitBytes)") }
        try execute(Self.routineSecureDelete)
        try execute("PRAGMA foreign_keys = ON")
        guard try scalarInt("PRAGMA foreign_keys") == 1 else {
            throw StorageError.pragmaNotApplied(path: path, pragma: "foreign_keys", expected: "1", actual: "0")
        }
    }

    /// The page size of files Spool creates: 16 KiB.
    ///
    /// Group commits write thousands of rows at once; with 4 KiB pages (the
    /// default) the writer spent about a fifth more CPU per event on page
    /// splits, WAL frames and checkpoint copies (spool-bench --phase
    /// record-parts: 1.9 vs 1.5 µs of process CPU per event). Flash storage
    /// writes 16 KiB pages anyway. Existing files keep theirs.
    package static let newFilePageSize = 16_384

    /// How deleted rows are overwritten outside an erasure: with zeros in the
    /// pages a transaction writes anyway, without writing a freed page again
    /// (`FAST`). Set on every connection, so it is the same whatever the
    /// library's compiled default: Debian's is `ON`, which writes every page
    /// a drain frees: 53 MB more over a drain of 200,000 events (spool-bench
    /// `--phase drain`, 704 against 651 MB written by the whole run). An
    /// erasure turns it fully on for its own transaction (``eraseAll()``).
    static let routineSecureDelete = "PRAGMA secure_delete = FAST"

    /// Each connection's page cache: SQLite's default, 2 MiB.
    package static let pageCacheKibibytes = 2_000

    /// True for a database with no page written yet.
    private func isEmptyFile() throws -> Bool {
        try scalarInt("PRAGMA page_count") == 0
    }

    /// Runs `body` again while it fails with `SQLITE_BUSY`, for at most
    /// `milliseconds` from the first try. For the locks SQLite reports taken
    /// at once instead of calling the busy handler: switching a new file to
    /// WAL needs an exclusive lock (an app and its extension opening the file
    /// together), and a checkpoint needs the checkpoint lock (another
    /// process's background checkpoint holds it while it runs).
    func retryingWhileBusy<T>(for milliseconds: Int32, _ body: () throws -> T) throws -> T {
        // clock-exempt: a real deadline, the other process's lock is held in real time, as SQLite's busy timeout.
        let deadline = Date().addingTimeInterval(Double(max(0, milliseconds)) / 1_000)
        var pause: UInt32 = 1_000
        while true {
            do {
                return try body()
            } catch let error as SQLiteError
                where error.resultCode == .busy && Date() < deadline  // clock-exempt: the deadline above
            {
                usleep(pause)  // clock-exempt: the deadline above
                pause = min(pause * 2, 50_000)
            }
        }
    }

    /// Finalizes every cached statement and closes the handle. Idempotent.
    package func close() {
        guard !isClosed else { return }
        isClosed = true
        for statement in statements.values { statement.finalize() }
        statements.removeAll()
        sqlite3_close_v2(handle)
    }

    // MARK: - Errors

    /// The one path from a SQLite result code to a thrown ``SQLiteError``.
    package func check(_ code: Int32, sql: String? = nil) throws {
        if code != SQLITE_OK && code != SQLITE_ROW && code != SQLITE_DONE {
            throw error(code, sql: sql)
        }
    }

    package func error(_ code: Int32, sql: String?) -> SQLiteError {
        let extended = sqlite3_extended_errcode(handle)
        // The connection's last error can be stale; trust `code` for the primary.
        let resolved = (extended & 0xFF) == (code & 0xFF) ? extended : code
        return SQLiteError(extendedResultCode: resolved, message: String(cString: sqlite3_errmsg(handle)), sql: sql)
    }

    // MARK: - Statements

    /// A cached prepared statement for `sql`, reset and unbound.
    package func cachedStatement(_ sql: String) throws -> Statement {
        if let statement = statements[sql] { return statement }
        let statement = try Statement(connection: self, sql: sql, persistent: true)
        statements[sql] = statement
        return statement
    }

    /// Runs `body` with a cached statement and resets it afterwards, whatever
    /// happens.
    @discardableResult
    package func withStatement<T>(_ sql: String, _ body: (Statement) throws -> T) throws -> T {
        let statement = try cachedStatement(sql)
        defer { statement.reset() }
        return try body(statement)
    }

    /// Executes SQL with no bound values (schema, pragmas, transaction control).
    /// Can hold several statements.
    package func execute(_ sql: String) throws {
        var message: UnsafeMutablePointer<CChar>?
        let code = sqlite3_exec(handle, sql, nil, nil, &message)
        if code != SQLITE_OK {
            let text = message.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(code))
            sqlite3_free(message)
            throw SQLiteError(extendedResultCode: sqlite3_extended_errcode(handle), message: text, sql: sql)
        }
    }

    package func scalarInt(_ sql: String) throws -> Int {
        try withStatement(sql) { statement in
            try statement.step() ? statement.int(at: 0) : 0
        }
    }

    package func scalarString(_ sql: String) throws -> String {
        try withStatement(sql) { statement in
            try statement.step() ? statement.string(at: 0) : ""
        }
    }

    // MARK: - Transactions

    package var isInTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    /// Runs `body` in a `BEGIN IMMEDIATE` transaction: committed when it
    /// returns, rolled back when it throws. Called inside a transaction, it
    /// runs `body` as part of that one (it commits or rolls back with it).
    /// Gives back the memory SQLite can free on this connection (its page
    /// cache's unused pages), as much as it can.
    package func releaseMemory() {
        sqlite3_db_release_memory(handle)
    }

    /// The bytes this connection's page cache holds now.
    package var cacheBytesUsed: Int {
        var current: Int32 = 0
        var highest: Int32 = 0
        sqlite3_db_status(handle, SQLITE_DBSTATUS_CACHE_USED, &current, &highest, 0)
        return Int(current)
    }

    package func transaction<T>(_ body: () throws -> T) throws -> T {
        if isInTransaction { return try body() }
        try withStatement("BEGIN IMMEDIATE") { try $0.step() }
        let result: T
        do {
            result = try body()
            try withStatement("COMMIT") { try $0.step() }
        } catch {
            // try?: a failed ROLLBACK leaves nothing to undo (SQLite already
            // rolled back, or the connection is gone); the caller gets `error`.
            if isInTransaction { _ = try? withStatement("ROLLBACK") { try $0.step() } }
            throw error
        }
        return result
    }

    package var changes: Int { Int(sqlite3_changes(handle)) }

    /// The rowid of this connection's last successful INSERT.
    package var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }
}

@available(*, unavailable, message: "A connection belongs to one serial executor; use DatabaseQueue")
extension Connection: Sendable {}
