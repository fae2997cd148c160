import CSQLite
import Dispatch

/// Moves WAL pages into the database file on its own connection and queue,
/// so the writer (and the app) never pays for a checkpoint inside a commit.
///
/// SQLite's automatic checkpoint runs inside the commit that crosses the
/// threshold, and on this machine its cost grows with the file (one commit in
/// every few at a 1M-event backlog cost three times the others). Spool
/// replaces it with a WAL hook on the writer connection that asks this object
/// for a `PASSIVE` checkpoint, which never blocks the writer.
final class Checkpointer: @unchecked Sendable {
    // Safe: `connection` is only touched on `queue`; `pending` is behind its lock.
    private let queue = DispatchQueue(label: "spool.checkpoint", qos: .utility)
    private var connection: Connection?
    private let pending = Protected(false)
    /// WAL pages after which a checkpoint is requested (SQLite's default too).
    let thresholdPages: Int32

    init(path: String, options: ConnectionOptions, thresholdPages: Int32 = 1_000) throws {
        self.thresholdPages = thresholdPages
        let connection = try Connection(path: path, options: options)
        // A checkpoint streams pages from the WAL; it needs no page cache of its own.
        try connection.execute("PRAGMA cache_size = -128")
        self.connection = connection
    }

    /// Installs the WAL hook on the writer. The writer must be closed before
    /// this object goes away.
    func install(on writer: Connection) {
        sqlite3_wal_hook(
            writer.handle,
            { context, _, _, pages in
                let checkpointer = Unmanaged<Checkpointer>.fromOpaque(context!).takeUnretainedValue()
                if pages >= checkpointer.thresholdPages { checkpointer.request() }
                return SQLITE_OK
            },
            Unmanaged.passUnretained(self).toOpaque())
    }

    /// Asks for a checkpoint; requests while one is pending coalesce.
    func request() {
        let start = pending.withLock { pending in
            defer { pending = true }
            return !pending
        }
        guard start else { return }
        queue.async {
            self.pending.withLock { $0 = false }
            self.checkpoint()
        }
    }

    private func checkpoint() {
        guard let connection else { return }
        // PASSIVE: copy what can be copied without waiting for the writer.
        sqlite3_wal_checkpoint_v2(connection.handle, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
    }

    /// Waits for a running checkpoint and closes the connection.
    func close() {
        queue.sync {
            connection?.close()
            connection = nil
        }
    }
}
