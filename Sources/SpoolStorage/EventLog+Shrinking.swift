import Foundation

// MARK: - Giving space back after a drain (on the database queue)

extension EventLog {
    /// Free space the file keeps rather than give back (page churn between
    /// bursts would only grow it again).
    static let keptFreeBytes = 1 << 20
    /// Pages given back per step, so a commit never waits long behind one:
    /// half the page cache. The pages a step frees stay dirty in the cache
    /// until its commit, which leaves those past the file's new end out of
    /// the WAL; a step larger than the cache would spill them into the WAL
    /// first, and on a full disk, where giving space back matters most,
    /// there is no room for that.
    static let shrinkStepBytes = Connection.pageCacheKibibytes * 1_024 / 2

    /// Gives the space a drained log no longer needs back to the file system,
    /// ``shrinkDelay`` seconds after the first drain that asks, once the
    /// writer has nothing to commit: free pages go in steps of
    /// ``shrinkStepBytes`` between commits, then the WAL is truncated. A
    /// file made before incremental auto-vacuum is rebuilt once, when the log
    /// is empty (its cost is what is left: the history).
    package func scheduleShrink() {
        let delay = state.withLock { state -> TimeInterval? in
            // The first drain sets the time; later ones do not push it back
            // (a steady trickle of uploads would postpone it forever).
            guard !state.shrinkScheduled else { return nil }
            state.shrinkScheduled = true
            return state.shrinkDelay
        }
        guard let delay else { return }
        database.asyncAfter(delay) { [weak self] connection in
            guard let self, let connection else { return }
            let writing = self.state.withLock { state in
                state.shrinkScheduled = false
                return state.buffer.writerScheduled && state.buffer.consecutiveFailures == 0
            }
            // The writer went idle in the middle of a burst and is busy
            // again: truncating now would leave the rest of the burst in a
            // WAL too small to ask for another shrink. Try again later. (A
            // writer whose commits fail, on a full disk, does not hold the
            // space back.)
            guard !writing else { return self.scheduleShrink() }
            self.shrinkStep(connection)
        }
    }

    /// How long after a drain the file gives space back (5 s; tests shorten it).
    package var shrinkDelay: TimeInterval {
        get { state.withLock { $0.shrinkDelay } }
        set { state.withLock { $0.shrinkDelay = max(0, newValue) } }
    }

    private func shrinkStep(_ connection: Connection) {
        database.assertOnQueue()
        do {
            let pageSize = try connection.pageSize()
            let free = try connection.freePageCount()
            if free * pageSize > Self.keptFreeBytes {
                if try connection.hasIncrementalVacuum() {
                    try connection.incrementalVacuum(pages: Self.shrinkStepBytes / pageSize)
                    // The next step after whatever commits queued meanwhile.
                    database.async { [weak self] connection in
                        guard let self, let connection else { return }
                        self.shrinkStep(connection)
                    }
                    return
                }
                if try connection.scalarInt("SELECT count(*) FROM (SELECT 1 FROM events LIMIT 1)") == 0 {
                    try connection.vacuum()
                }
            }
            try connection.truncateWAL()
        } catch let error as SQLiteError where error.resultCode == .busy {
            // A reader (the checkpointer, another process) held the WAL:
            // try again later rather than keep the space until the next drain.
            scheduleShrink()
        } catch {
            // Nothing is lost: the file stays larger until the next drain.
            state.withLock { $0.failureHandler }?(.shrinkFailed(error))
            database.noticeDamage(error)
        }
    }
}
