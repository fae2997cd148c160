import Dispatch
import Foundation

/// The serial queue that owns the write connection.
///
/// Every `sqlite3_*` call on that connection runs on `queue`: the writer's
/// commits, consumers' reads and position saves, and the uploader (an actor
/// whose executor is ``executor``). Work that must not block a caller goes
/// through ``async(_:)`` or ``run(_:)``; ``sync(_:)`` is for callers that are
/// certainly elsewhere (it traps when called from the queue itself, where it
/// would deadlock).
package final class DatabaseQueue: @unchecked Sendable {
    // Safe: `connection` is only touched from blocks running on `queue`:
    // each entry point either dispatches onto it (`sync` and `close` check
    // they are not already there) or checks that it runs there
    // (`assertOnQueue`: `onQueue`, `replaceFile`, `fileGeneration`); `deinit`
    // touches it directly, when no block can be running.
    private let queue: DispatchQueue
    private var connection: Connection?
    /// The identity (``Connection/fileIdentity()``) of the file the
    /// connections opened, read as they opened it: another process's salvage
    /// may put another file at ``path``.
    private var opened: UInt64?
    private let checkpointer: Checkpointer?
    /// Suspended (the app is about to be suspended by the OS): no block
    /// touches the connection; work waits in `deferred` until resumed.
    /// Confined to `queue`; `gate` mirrors it for callers elsewhere.
    private var suspended = false
    private var deferred: [() -> Void] = []
    private let gate = Protected(false)
    /// Whether ``suspend()`` holds one of the checkpointer's pauses (pauses
    /// count, so an erasure's and a suspension's do not undo each other).
    private let checkpointsSuspended = Protected(false)
    /// Told, on the queue, when work arrives while suspended (the engine
    /// opens a background window to run it).
    package let onDeferredWork = Protected<(@Sendable () -> Void)?>(nil)
    /// The path as given (`:memory:` for an in-memory database).
    package let path: String
    private let options: ConnectionOptions
    /// How many times ``replaceFile(_:)`` put another file under this queue.
    /// Confined to `queue`.
    private var generation = 0
    /// Told, on the queue, the error of a block that found the file damaged
    /// (`SQLITE_CORRUPT`, see ``StorageError/meansDamage(_:)``) while
    /// running; the block's caller gets the error as well.
    package let onDamage = Protected<(@Sendable (any Error) -> Void)?>(nil)
    /// See ``closesWithIt(_:)``.
    private let mark = Protected<StoreMark?>(nil)
    /// An executor that runs an actor's jobs on this queue, so the actor can
    /// use the connection without a hop to another thread.
    package let executor: QueueExecutor

    /// Opens the database at `path` (``Connection/inMemoryPath`` for a private
    /// in-memory one) and applies every embedded migration.
    ///
    /// - Throws: ``StorageError/unsupportedSQLite(version:reason:)`` before
    ///   touching the file when the linked SQLite is too old;
    ///   ``StorageError/damaged(path:reason:)`` for a file cut short.
    package init(path: String, options: ConnectionOptions = ConnectionOptions()) throws {
        try SQLiteRequirements.check()
        if path != Connection.inMemoryPath { try DatabaseFileCheck.checkWholePages(path) }
        self.path = path
        self.options = options
        self.queue = DispatchQueue(label: "spool.database", qos: .utility)
        self.executor = QueueExecutor(queue: queue)
        let connection = try queue.sync { try Self.openMigrated(path, options) }
        if path == Connection.inMemoryPath {
            checkpointer = nil
        } else {
            do {
                let checkpointer = try Checkpointer(path: path, options: options)
                queue.sync { checkpointer.install(on: connection) }
                self.checkpointer = checkpointer
            } catch {
                queue.sync { connection.close() }
                throw error
            }
        }
        // Published on the queue, where every later access happens.
        queue.sync {
            self.connection = connection
            self.opened = Self.identity(of: connection)
        }
        queue.setSpecific(key: Self.identity, value: ObjectIdentifier(self))
    }

    /// Whether the WAL passed the checkpoint threshold (4 MiB) since the
    /// last call: its file keeps that size until truncated.
    package func takeWALGrown() -> Bool {
        checkpointer?.takeGrown() ?? false
    }

    deinit {
        // No block on `queue` can be running: each one holds `self`. So close
        // directly — `close()`'s queue.sync would deadlock if the last
        // reference went away on the queue itself (an actor it executes).
        connection?.close()
        checkpointer?.close()
    }

    /// Runs `body` on the queue and waits for it. Never call it from the
    /// queue (it checks).
    package func sync<T>(_ body: (Connection) throws -> T) throws -> T {
        dispatchPrecondition(condition: .notOnQueue(queue))
        while true {
            let result: Result<T, any Error>? = queue.sync {
                guard !suspended else {
                    askForWindow()
                    return nil
                }
                guard let connection else { return .failure(StorageError.closed) }
                return Result { try noticingDamage { try body(connection) } }
            }
            if let result { return try result.get() }
            // Suspended: wait (off the queue) until resumed, then try again.
            _ = gate.wait(until: .distantFuture) { !$0 }
        }
    }

    /// Runs `body` on the queue without waiting. `body` gets nil once closed.
    package func async(_ body: @escaping @Sendable (Connection?) -> Void) {
        queue.async { self.perform { body(self.connection) } }
    }

    /// What delayed blocks (``asyncAfter(_:_:)``, ``timer(after:_:)``), the
    /// connection and the code using this database read the time from:
    /// ``ConnectionOptions/clock``.
    package var clock: any SpoolClock { options.clock }

    /// Runs `body` on the queue after `delay` seconds of ``clock``; `body`
    /// gets nil once closed. The wait does not keep this object alive.
    package func asyncAfter(_ delay: TimeInterval, _ body: @escaping @Sendable (Connection?) -> Void) {
        clock.schedule(after: delay, on: queue) { [weak self] in
            guard let self else { return body(nil) }
            self.perform { body(self.connection) }
        }
    }

    /// What a ``timer(after:_:)`` block finds when it fires.
    package enum TimerFiring {
        /// The connection, to use now.
        case awake(Connection)
        /// Suspended: touch nothing; the work waits for the next firing.
        case suspended
        case closed
    }

    /// Runs `body` on the queue after `delay` seconds, like
    /// ``asyncAfter(_:_:)``, except that while suspended it is not kept for
    /// a background window: it runs at once, told `.suspended`. For timers
    /// whose work can wait for their next firing (a lease renewal, a retry),
    /// which must not wake a suspended app. The wait does not keep this
    /// object alive.
    package func timer(after delay: TimeInterval, _ body: @escaping @Sendable (TimerFiring) -> Void) {
        clock.schedule(after: delay, on: queue) { [weak self] in
            guard let self, let connection = self.connection else { return body(.closed) }
            body(self.suspended ? .suspended : .awake(connection))
        }
    }

    /// Runs `body` on the queue and awaits its result.
    package func run<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async {
                self.perform {
                    guard let connection = self.connection else {
                        continuation.resume(throwing: StorageError.closed)
                        return
                    }
                    continuation.resume(with: Result { try self.noticingDamage { try body(connection) } })
                }
            }
        }
    }

    /// Opens the file at `path` and applies every embedded migration.
    private static func openMigrated(_ path: String, _ options: ConnectionOptions) throws -> Connection {
        let connection = try Connection(path: path, options: options)
        do {
            let applied = try Migrator(migrations: Migration.embedded).migrate(connection)
            // The schema, and the first migration's row that names this
            // file (`fileIdentity`), go into the database file itself
            // at once, not only into the WAL: losing the WAL must not
            // make the file look new.
            if applied > 0 && !connection.isInMemory { connection.checkpointPassive() }
        } catch {
            connection.close()
            throw error
        }
        return connection
    }

    /// Tells a block running on `queue` which database queue it is on.
    private static let identity = DispatchSpecificKey<ObjectIdentifier>()

    /// True when called from this queue (a block or an actor job on it).
    package var isCurrent: Bool {
        DispatchQueue.getSpecific(key: Self.identity) == ObjectIdentifier(self)
    }

    /// Traps unless called from the queue itself.
    package func assertOnQueue() {
        dispatchPrecondition(condition: .onQueue(queue))
    }

    /// Runs `body` with the connection, for code already running on the
    /// queue (an actor whose executor is ``executor``).
    package func onQueue<T>(_ body: (Connection) throws -> T) throws -> T {
        assertOnQueue()
        guard !suspended else { throw StorageError.suspended }
        guard let connection else { throw StorageError.closed }
        return try noticingDamage { try body(connection) }
    }

    // MARK: - Damage found while running

    /// Runs `body`, telling ``onDamage`` when it throws an error that means
    /// the file is damaged.
    private func noticingDamage<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch {
            noticeDamage(error)
            throw error
        }
    }

    /// Tells ``onDamage`` when `error`, met by a block on the queue that
    /// does not throw (the writer), means the file is damaged.
    package func noticeDamage(_ error: any Error) {
        if StorageError.meansDamage(error) { onDamage.withLock { $0 }?(error) }
    }

    /// How many times ``replaceFile(_:)`` put another file under this queue:
    /// positions read before it changed belong to the file before. On the
    /// queue.
    package var fileGeneration: Int {
        assertOnQueue()
        return generation
    }

    /// On the queue: closes both connections, lets `rebuild` put another
    /// file at ``path`` (a salvage moves the damaged one aside), and opens
    /// whatever is there then — the new file, or the old one when `rebuild`
    /// threw and left it in place. Blocks queued meanwhile run on the file
    /// opened here. When even that cannot be opened, every later block gets
    /// ``StorageError/closed``.
    package func replaceFile<T>(_ rebuild: () throws -> T) throws -> T {
        assertOnQueue()
        guard let old = connection else { throw StorageError.closed }
        old.close()
        connection = nil
        checkpointer?.close()
        let rebuilt = Result { try rebuild() }
        let reopened = try Self.openMigrated(path, options)
        if let checkpointer {
            do {
                try checkpointer.reopen(path: path, options: options)
            } catch {
                reopened.close()
                throw error
            }
            checkpointer.install(on: reopened)
        }
        connection = reopened
        opened = Self.identity(of: reopened)
        if case .success = rebuilt { generation += 1 }
        return try rebuilt.get()
    }

    /// On the queue: whether the file at ``path`` is the one the
    /// connections have open. False once another process's salvage moved it
    /// aside and put a fresh one there (``replaceFile(_:)`` with nothing to
    /// rebuild then opens that one). A file at the path that cannot be read
    /// is taken for the one open: the damaged file.
    package var hasTheFileAtPath: Bool {
        assertOnQueue()
        guard let opened, path != Connection.inMemoryPath else { return true }
        return Connection.fileIdentity(at: path).map { $0 == opened } ?? true
    }

    /// The identity of the file `connection` has open; nil when it cannot
    /// be read.
    private static func identity(of connection: Connection) -> UInt64? {
        do {
            return try connection.fileIdentity()
        } catch {
            return nil
        }
    }

    // MARK: - Suspension

    /// Runs `work` now, or keeps it for ``resume()`` while suspended.
    private func perform(_ work: @escaping () -> Void) {
        guard suspended else { return work() }
        deferred.append(work)
        if deferred.count == 1 { askForWindow() }
    }

    private func askForWindow() {
        onDeferredWork.withLock { $0 }?()
    }

    /// True while ``suspend()`` holds.
    package var isSuspended: Bool { gate.withLock { $0 } }

    /// True while the background checkpoints are paused for a suspension.
    package var areCheckpointsSuspended: Bool { checkpointsSuspended.withLock { $0 } }

    /// Stops touching the file: waits for the block running now (a commit
    /// finishes; statements are never left open across blocks), then keeps
    /// every later one for ``resume()``; the checkpointer finishes its pass
    /// and starts no other. No lock and no read transaction is held on the
    /// file from when this returns until ``resume()`` — what an app sharing
    /// the file through an app group needs before iOS suspends it.
    package func suspend() async {
        await withCheckedContinuation { continuation in
            queue.async {
                self.suspended = true
                self.gate.withLock { $0 = true }
                continuation.resume()
            }
        }
        let pause = checkpointsSuspended.withLock { suspended in
            defer { suspended = true }
            return !suspended
        }
        if pause { await checkpointer?.pause() }
    }

    /// Touches the file again: runs what waited, in order.
    package func resume() {
        let resume = checkpointsSuspended.withLock { suspended in
            defer { suspended = false }
            return suspended
        }
        if resume { checkpointer?.resume() }
        queue.async {
            guard self.suspended else { return }
            self.suspended = false
            self.gate.withLock { $0 = false }
            self.gate.broadcast()
            let work = self.deferred
            self.deferred.removeAll()
            for item in work { item() }
        }
    }

    /// Runs `body` with no background checkpoint running or starting: a
    /// `wal_checkpoint(TRUNCATE)` inside it is then only kept from finishing
    /// by another connection (another process), never by Spool's own.
    package func withCheckpointsPaused<T>(_ body: () async throws -> T) async rethrows -> T {
        await checkpointer?.pause()
        defer { checkpointer?.resume() }
        return try await body()
    }

    /// Closes the connection after every block already queued has run.
    package func close() {
        dispatchPrecondition(condition: .notOnQueue(queue))
        queue.sync {
            connection?.close()
            connection = nil
        }
        // Last: the checkpointer's connection then checkpoints and removes the WAL.
        checkpointer?.close()
        mark.withLock { $0 }?.close()
    }

    /// Closes `mark` (the high-water mark beside the file) with the
    /// database, whoever still holds it then.
    package func closesWithIt(_ mark: StoreMark?) {
        self.mark.withLock { $0 = mark }
    }
}
