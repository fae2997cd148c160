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
package final class Checkpointer: @unchecked Sendable {
    // Safe: `connection` is only touched on `queue`; `flags` is behind its lock.
    private let queue = DispatchQueue(label: "spool.checkpoint", qos: .utility)
    private var connection: Connection?
    /// A pass is queued; how many pauses hold (the app is in the
    /// background, an erasure truncates the WAL);
    /// the WAL passed the checkpoint threshold since ``takeGrown()`` last
    /// asked.
    private let flags = Protected((pending: false, paused: 0, grown: false))
    /// WAL pages after which a background checkpoint is requested (SQLite's
    /// default threshold too).
    package let thresholdPages: Int32
    /// WAL pages after which the writer restarts the WAL itself.
    ///
    /// Under continuous writes a passive checkpoint never catches up with the
    /// writer, so the WAL never starts over and grows without bound (214 MB
    /// at a 1M-event backlog, commits slowing as its index grows). Past this
    /// limit the writer runs a RESTART checkpoint between two transactions:
    /// the background pass has already copied most frames, so it copies few,
    /// and the next commit writes the WAL from its beginning.
    package let restartPages: Int32

    /// The WAL size past which the writer restarts it, by default.
    package static let restartBytes = 16 << 20

    /// The writer's busy timeout, restored after a restart attempt.
    private let busyTimeoutMilliseconds: Int32

    /// - Parameters:
    ///   - thresholdBytes: WAL size that asks for a background checkpoint
    ///     (4 MiB: SQLite's default of 1,000 pages of 4 KiB).
    ///   - restartBytes: WAL size past which the writer restarts it (16 MiB).
    package init(
        path: String, options: ConnectionOptions, thresholdBytes: Int = 4 << 20,
        restartBytes: Int = Checkpointer.restartBytes
    ) throws {
        self.busyTimeoutMilliseconds = options.busyTimeoutMilliseconds
        let connection = try Connection(path: path, options: options)
        // The thresholds count pages of this file's size (16 KiB for files
        // Spool creates, 4 KiB for older ones).
        let pageSize = try connection.pageSize()
        self.thresholdPages = Int32(clamping: max(1, thresholdBytes / pageSize))
        self.restartPages = Int32(clamping: max(2, restartBytes / pageSize))
        // A checkpoint streams pages from the WAL; it needs no page cache of its own.
        try connection.execute("PRAGMA cache_size = -128")
        self.connection = connection
    }

    /// Installs the WAL hook on the writer. The writer must be closed before
    /// this object goes away.
    package func install(on writer: Connection) {
        sqlite3_wal_hook(
            writer.handle,
            { context, writer, database, pages in
                let checkpointer = Unmanaged<Checkpointer>.fromOpaque(context!).takeUnretainedValue()
                if pages >= checkpointer.restartPages {
                    // Never wait: a reader in another process (an app extension,
                    // the sqlite3 CLI inside a transaction) or the background pass
                    // would stall every commit for the busy timeout. Busy, it acts
                    // as a passive pass and the next commit tries again.
                    sqlite3_busy_timeout(writer, 0)
                    sqlite3_wal_checkpoint_v2(writer, database, SQLITE_CHECKPOINT_RESTART, nil, nil)
                    sqlite3_busy_timeout(writer, checkpointer.busyTimeoutMilliseconds)
                    // No new background pass here: it would hold the checkpoint
                    // lock when the next commit tries to restart, and in a burst
                    // nearly every attempt then failed (656 of 698; the WAL
                    // reached 50 MB). A running pass finishes; the next commit
                    // restarts.
                    checkpointer.flags.withLock { $0.grown = true }
                } else if pages >= checkpointer.thresholdPages, checkpointer.grewSinceLastRequest(pages) {
                    checkpointer.request(walGrown: true)
                }
                return SQLITE_OK
            },
            Unmanaged.passUnretained(self).toOpaque())
    }

    /// WAL pages when the writer last asked for a pass. Only the writer's
    /// WAL hook touches it (on the writer's queue).
    private var requestedAtPages: Int32 = 0

    /// Whether the WAL of `pages` grew by another ``thresholdPages`` since
    /// the writer last asked for a pass, or started over since: a passive
    /// pass never catches up with a writer that commits while it runs, and
    /// asking after every commit would copy and sync a few pages each time.
    private func grewSinceLastRequest(_ pages: Int32) -> Bool {
        guard pages < requestedAtPages || pages - requestedAtPages >= thresholdPages else { return false }
        requestedAtPages = pages
        commitRequests += 1
        return true
    }

    /// How many times the writer's commits asked for a pass (on the
    /// writer's queue).
    package private(set) var commitRequests = 0

    /// Whether the WAL passed ``thresholdPages`` since the last call: its
    /// file is then at least that large until truncated (a WAL that starts
    /// over keeps its file; see `Connection.walSizeLimitBytes`).
    package func takeGrown() -> Bool {
        flags.withLock { flags in
            defer { flags.grown = false }
            return flags.grown
        }
    }

    /// Asks for a checkpoint; requests while one is pending coalesce.
    /// `walGrown`: the WAL passed the threshold (see ``takeGrown()``).
    package func request(walGrown: Bool = false) {
        let start = flags.withLock { flags in
            if walGrown { flags.grown = true }
            guard !flags.pending, flags.paused == 0 else { return false }
            flags.pending = true
            return true
        }
        guard start else { return }
        queue.async {
            self.flags.withLock { $0.pending = false }
            self.checkpoint()
        }
    }

    private func checkpoint() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let connection else { return }
        // PASSIVE: copy what can be copied without waiting for the writer.
        sqlite3_wal_checkpoint_v2(connection.handle, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
    }

    /// Waits for a running checkpoint and starts no other until ``resume()``.
    package func pause() async {
        flags.withLock { $0.paused += 1 }
        await withCheckedContinuation { continuation in queue.async { continuation.resume() } }
    }

    /// Checkpoints again, starting with one pass now.
    package func resume() {
        flags.withLock { $0.paused = max(0, $0.paused - 1) }
        request()
    }

    /// Waits for a running checkpoint and opens the file now at `path`
    /// instead (the file under the writer was replaced).
    package func reopen(path: String, options: ConnectionOptions) throws {
        try queue.sync {
            connection?.close()
            connection = nil
            let reopened = try Connection(path: path, options: options)
            try reopened.execute("PRAGMA cache_size = -128")
            connection = reopened
        }
    }

    /// Waits for a running checkpoint and closes the connection.
    package func close() {
        queue.sync {
            connection?.close()
            connection = nil
        }
    }
}
