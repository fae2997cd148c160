import CSQLite
import Foundation

extension Connection {
    /// Deletes every queued event, the whole history (with the property
    /// values kept for survey filters), the dead letters, the
    /// identities and contexts, the record of recent upload requests and of
    /// batches handed to the system, the loss not yet reported,
    /// and moves every consumer to the head with its drop counts cleared, in
    /// one transaction with `secure_delete` on: the deleted rows' bytes are
    /// overwritten with zeros in the database file, not just unlinked. The
    /// same transaction counts the erasure (`log_head.erasures`, which other
    /// processes watch) and writes the anonymous identity, with a new
    /// anonymous id, that every process records for next.
    ///
    /// Positions stay where the log's head is, so no position is ever
    /// reused. The caller then ``truncateWAL()`` (the WAL still holds the
    /// rows' earlier frames) and ``vacuum()``.
    ///
    /// - Returns: the head the consumers now stand at, the identity left, and
    ///   the file's erasure count.
    ///
    /// The rebuild that follows is noted for `owner` (``notePendingRebuild(at:owner:)``).
    @discardableResult
    package func eraseAll(at now: Double, owner: String) throws -> (
        head: Int64, identity: IdentityRow, erasures: Int64
    ) {
        try execute("PRAGMA secure_delete = ON")
        defer {
            // try?: going back to routine secure deletion only costs speed
            // if it fails; nothing is lost or kept.
            try? execute(Self.routineSecureDelete)
        }
        return try sealingTransaction {
            let head = try headPosition()
            try execute("DELETE FROM events")
            try execute("DELETE FROM event_history")
            // The property values survey filters read, kept with it.
            try execute("DELETE FROM event_history_values")
            try execute("DELETE FROM dead_letters")
            // Which events each recent request carried: ids of the user's events.
            try execute("DELETE FROM upload_batches")
            // Batches handed to the system: their body files go with them.
            try execute("DELETE FROM background_transfers")
            // Loss not yet reported: it describes the erased events.
            try forgetLoss()
            // Who the user was: the next event gets a new anonymous id. The
            // ids are AUTOINCREMENT: none deleted here is given again.
            try execute("DELETE FROM identities")
            try execute("DELETE FROM contexts")
            try withStatement(
                "UPDATE consumers SET position = ?, dropped = 0, dropped_reported = 0, updated_at = ?"
            ) { statement in
                try statement.bind(head, at: 1)
                try statement.bind(now, at: 2)
                try statement.step()
            }
            try execute("UPDATE log_head SET erasures = erasures + 1 WHERE id = 1")
            // Until the file is rebuilt: a start finishes a rebuild that did not.
            try notePendingRebuild(at: now, owner: owner)
            let identity = try insertIdentity(
                anonymousID: UUID().uuidString.lowercased(), userID: nil, traitsJSON: "{}", createdAt: now)
            return (head, identity, try identityWatermark().erasures)
        }
    }

    /// Copies the whole WAL into the database file and truncates the WAL to
    /// zero bytes, waiting at most the busy timeout for readers, and for
    /// another connection's checkpoint to end (SQLite reports that one at
    /// once, without waiting).
    ///
    /// - Throws: ``SQLiteError`` with `.busy` when another connection (a
    ///   reader in another process, a checkpoint) kept it from completing for
    ///   the busy timeout.
    package func truncateWAL() throws {
        try retryingWhileBusy(for: busyTimeoutMilliseconds) {
            var logFrames: Int32 = 0
            var checkpointed: Int32 = 0
            let code = sqlite3_wal_checkpoint_v2(handle, nil, SQLITE_CHECKPOINT_TRUNCATE, &logFrames, &checkpointed)
            try check(code, sql: "PRAGMA wal_checkpoint(TRUNCATE)")
        }
    }

    /// Leaves no byte of deleted rows in the files: the WAL checkpointed and
    /// truncated, the file rebuilt with its live pages (``vacuum()``), and
    /// the WAL that wrote truncated again; the note of the rebuild `owner`
    /// runs (``notePendingRebuild(at:owner:)``) is deleted with it. When it
    /// fails, the note is let go (``releasePendingRebuild(owner:)``) for the
    /// next start to finish. Run with the background checkpoints paused: a
    /// passive pass holding the WAL makes a TRUNCATE wait.
    package func rebuildWithoutDeletedBytes(owner: String) throws {
        do {
            try truncateWAL()
            try vacuum()
            try withStatement("DELETE FROM rebuild_pending WHERE owner = ?") { statement in
                try statement.bind(owner, at: 1)
                try statement.step()
            }
            try truncateWAL()
        } catch {
            releasePendingRebuild(owner: owner)
            throw error
        }
    }

    /// Notes (`rebuild_pending`) that rows were deleted whose bytes stay in
    /// the files until `owner` (a ``LeaseOwner``) runs
    /// ``rebuildWithoutDeletedBytes(owner:)``: if its process is killed
    /// first, or the rebuild fails, the next start finishes it. The first
    /// note's time is kept.
    package func notePendingRebuild(at now: Double, owner: String) throws {
        try withStatement(
            """
            INSERT INTO rebuild_pending (id, since, owner) VALUES (1, ?, ?) \
            ON CONFLICT (id) DO UPDATE SET owner = excluded.owner
            """
        ) { statement in
            try statement.bind(now, at: 1)
            try statement.bind(owner, at: 2)
            try statement.step()
        }
    }

    /// Lets go of the note `owner` holds, after its rebuild failed: any
    /// start may finish it now.
    package func releasePendingRebuild(owner: String) {
        // A note that cannot be let go stays with its owner, and the first
        // start after that process ends finishes the rebuild.
        let release = "UPDATE rebuild_pending SET owner = NULL WHERE owner = ?"
        try? withStatement(release) { statement in  // try?: nothing is lost
            try statement.bind(owner, at: 1)
            try statement.step()
        }
    }

    /// Takes the note of a rebuild that did not finish, for `owner` to
    /// finish: one let go, or one whose owner's process has ended. A
    /// rebuild another running engine has noted is its own (an erasure or
    /// `reencryptAll()` under way), and is left to it.
    ///
    /// - Returns: whether `owner` holds the note now.
    package func claimPendingRebuild(owner: String) throws -> Bool {
        try transaction {
            let holder = try withStatement("SELECT owner FROM rebuild_pending WHERE id = 1") {
                statement -> String?? in
                try statement.step() ? .some(statement.optionalString(at: 0)) : nil
            }
            guard let holder else { return false }
            if let holder, holder != owner, LeaseOwner.isAlive(holder) { return false }
            try withStatement("UPDATE rebuild_pending SET owner = ? WHERE id = 1") { statement in
                try statement.bind(owner, at: 1)
                try statement.step()
            }
            return true
        }
    }

    /// When the oldest rebuild that did not finish was noted, and who is
    /// rebuilding it (nil when nobody is); nil when none waits.
    package func pendingRebuild() throws -> (since: Double, owner: String?)? {
        try withStatement("SELECT since, owner FROM rebuild_pending WHERE id = 1") { statement in
            try statement.step() ? (statement.double(at: 0), statement.optionalString(at: 1)) : nil
        }
    }

    /// Rebuilds the file with only its live pages (and incremental
    /// auto-vacuum from then on). Cost is proportional to what is left.
    package func vacuum() throws {
        try execute("PRAGMA auto_vacuum = INCREMENTAL")
        try execute("VACUUM")
    }

    /// Pages on the freelist: space the file could give back.
    package func freePageCount() throws -> Int {
        try scalarInt("PRAGMA freelist_count")
    }

    /// The file's page size in bytes (at least SQLite's smallest, 512).
    package func pageSize() throws -> Int {
        max(512, try scalarInt("PRAGMA page_size"))
    }

    /// True when the file can shrink in steps (`auto_vacuum = INCREMENTAL`).
    package func hasIncrementalVacuum() throws -> Bool {
        try scalarInt("PRAGMA auto_vacuum") == 2
    }

    /// Gives back up to `pages` free pages at the end of the file.
    package func incrementalVacuum(pages: Int) throws {
        // The count cannot be bound; it is our own integer.
        try execute("PRAGMA incremental_vacuum(\(max(1, pages)))")
    }
}
