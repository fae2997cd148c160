import Dispatch
import Foundation

/// Where a database lives.
public enum DatabaseLocation: Sendable, Hashable {
    /// A file on disk (created with mode 0600 if missing).
    case file(URL)
    /// A private in-memory database: nothing survives `close()`.
    case inMemory

    var path: String {
        switch self {
        case .file(let url): return url.path
        case .inMemory: return ":memory:"
        }
    }
}

/// The serial executor that owns Spool's one connection.
///
/// Every `sqlite3_*` call runs on `queue`. Work that must not block a caller
/// goes through `async`; tests and benchmarks can use `sync`.
@_spi(Internals) public final class DatabaseQueue: @unchecked Sendable {
    // Safe: `connection` is only touched from blocks running on `queue`
    // (enforced with dispatchPrecondition in debug builds).
    private let queue: DispatchQueue
    private var connection: Connection?
    private let checkpointer: Checkpointer?
    let path: String

    /// Opens the database and applies every embedded migration.
    @_spi(Internals) public convenience init(location: DatabaseLocation, synchronous: SynchronousMode = .normal) throws
    {
        try self.init(location: location, options: ConnectionOptions(synchronous: synchronous))
    }

    init(location: DatabaseLocation, options: ConnectionOptions) throws {
        self.path = location.path
        self.queue = DispatchQueue(label: "spool.database", qos: .utility)
        self.executor = QueueExecutor(queue: queue)
        let path = self.path
        let connection = try queue.sync {
            let connection = try Connection(path: path, options: options)
            do {
                try Migrator(migrations: Migration.embedded).migrate(connection)
            } catch {
                connection.close()
                throw error
            }
            return connection
        }
        if location == .inMemory {
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
        queue.sync { self.connection = connection }
    }

    deinit {
        // No block on `queue` can be running: each one holds `self`. So close
        // directly — `close()`'s queue.sync would deadlock if the last
        // reference went away on the queue itself (an actor it executes).
        connection?.close()
        checkpointer?.close()
    }

    /// Runs `body` on the queue and waits for it. Never call from the queue.
    func sync<T>(_ body: (Connection) throws -> T) throws -> T {
        try queue.sync {
            guard let connection else { throw SpoolError.closed }
            return try body(connection)
        }
    }

    /// Runs `body` on the queue without waiting. `body` gets nil once closed.
    func async(_ body: @escaping @Sendable (Connection?) -> Void) {
        queue.async { body(self.connection) }
    }

    /// Runs `body` on the queue after `delay` seconds.
    func asyncAfter(_ delay: TimeInterval, _ body: @escaping @Sendable (Connection?) -> Void) {
        queue.asyncAfter(deadline: .now() + delay) { body(self.connection) }
    }

    /// Runs `body` on the queue and awaits its result.
    func run<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async {
                guard let connection = self.connection else {
                    continuation.resume(throwing: SpoolError.closed)
                    return
                }
                continuation.resume(with: Result { try body(connection) })
            }
        }
    }

    /// True when called from the queue itself.
    func assertOnQueue() {
        dispatchPrecondition(condition: .onQueue(queue))
    }

    /// Runs `body` with the connection, for code already running on the
    /// queue (an actor whose executor is ``executor``).
    func onQueue<T>(_ body: (Connection) throws -> T) throws -> T {
        assertOnQueue()
        guard let connection else { throw SpoolError.closed }
        return try body(connection)
    }

    /// An executor that runs an actor's jobs on this queue, so the actor can
    /// use the connection without a hop to another thread.
    let executor: QueueExecutor

    /// Closes the connection after every block already queued has run.
    @_spi(Internals) public func close() {
        queue.sync {
            connection?.close()
            connection = nil
        }
        // Last: the checkpointer's connection then checkpoints and removes the WAL.
        checkpointer?.close()
    }
}
