import Foundation
import SpoolStorage

// MARK: - Erasure and consent withdrawal

extension EventEngine {
    /// Deletes everything Spool keeps about the user: queued events (those
    /// waiting for a session too), the event history (with the property
    /// values kept for survey filters), dead letters and
    /// durable-listener positions, and makes the deleted bytes unrecoverable
    /// from the database, its `-wal` and `-shm` files.
    ///
    /// Everything recorded before the call is erased: events still buffered
    /// are committed first, then deleted with `secure_delete` on (their bytes
    /// overwritten with zeros) in one transaction; the WAL, which still holds
    /// earlier copies of those pages, is checkpointed and truncated to zero
    /// bytes; and the file is rebuilt to its live size. Every copy Spool set
    /// aside at the database's path (damaged, newer or unrecognised: see
    /// ``SalvageReport``) is deleted too, with its `-wal` and `-shm`, and so is
    /// every request body handed to the system (``BackgroundTransfers``),
    /// whose transfers are cancelled. An upload in flight
    /// is allowed to finish first (a request already sent cannot be called
    /// back), and none starts until the erasure is done, so no erased event is
    /// uploaded after this returns. Every event accepted from then on, in
    /// this process and in any other using the file, is recorded for a new
    /// anonymous id (an event another process held but had not committed
    /// yet too); the ids of erased identity and context rows are never given
    /// again. Durable listeners resume with the events
    /// recorded after it; they are not told of the erased ones as drops.
    ///
    /// While the disk is full, events whose commit failed are dropped from
    /// memory and never reach the file (a `recordDurably` waiting for one
    /// throws ``SpoolError/erased``). If the rows cannot be deleted on the
    /// full disk, this throws: call it again once commits succeed
    /// (``SpoolDiagnostic/Kind/commitRecovered``).
    ///
    /// Use it for an account deletion or an erasure request (GDPR, CCPA).
    ///
    /// - Throws: ``SpoolError/erasureIncomplete(paths:)`` when a copy set
    ///   aside could not be deleted (the database itself was erased: the
    ///   paths named are what is left); ``SpoolError/notStarted`` before
    ///   `start()`; ``SpoolError/sqlite(_:)``
    ///   when the database could not be written (nothing was deleted then),
    ///   or with `.busy` when another process held a read transaction or a
    ///   checkpoint for longer than the busy timeout (5 s), so that the WAL
    ///   could not be truncated (the rows are deleted; call again to finish
    ///   now, or the next `start()` finishes it). A checkpoint that ends
    ///   sooner is waited for. An app killed during the call has its next
    ///   `start()` finish it too.
    public func eraseAllData() async throws {
        guard let log = state.withLock({ $0.log }) else { throw SpoolError.notStarted }
        let waiting = state.withLock { $0.gates.takeWaiting() }
        for entry in waiting { entry.settle?(.failed(SpoolError.erased)) }
        try await quiescingUploads {
            do {
                try await log.waitUntilAllDurable()
            } catch StorageError.notYetCommitted {
                // The disk is full: what cannot be committed is erased from
                // memory instead, and never reaches the file.
                log.discardBuffered(because: StorageError.erased)
            }
            // With Spool's own background checkpoints paused (see
            // `rebuildWithoutDeletedBytes`).
            let head = try await SpoolError.bridgingAsync {
                try await log.database.withCheckpointsPaused {
                    try await log.database.run {
                        [identities, clock = configuration.clock, owner = leaseOwner] connection -> Int64 in
                        let (head, identity, erasures) = try connection.eraseAll(at: clock.now, owner: owner)
                        identities.erased(leaving: identity, erasures: erasures)
                        try connection.rebuildWithoutDeletedBytes(owner: owner)
                        return head
                    }
                }
            }
            // Rows of requests not yet written to `upload_batches` (a flush
            // that ended on a database error) name the events just erased.
            await uploaderBox.withLock { $0 }?.forgetUnsavedRecords()
            // The bodies of batches handed to the system hold erased events.
            let bodiesLeft = await uploaderBox.withLock { $0 }?.eraseHandoffs() ?? []
            events.durables.erased(through: head)
            try deleteSetAsideCopies(alsoLeft: bodiesLeft)
        }
    }

    /// Finishes the rebuild of an erasure or a `reencryptAll()` that did not
    /// finish it (its process was killed during the call, or another
    /// process held the WAL past the busy timeout): until it runs, bytes of
    /// the rows they deleted may stay in the `-wal` and in free pages. One
    /// that another running engine is still doing is left to it
    /// (``Connection/claimPendingRebuild(owner:)``). A failure is reported
    /// (``SpoolDiagnostic/Kind/erasureUnfinished``) and leaves the note for
    /// the next start.
    func finishPendingRebuild(_ database: DatabaseQueue) async {
        let owner = leaseOwner
        do {
            // A read first: the claim takes the write lock, which a start
            // with nothing to finish does not need.
            guard try await database.run({ try $0.pendingRebuild() }) != nil,
                try await database.run({ try $0.claimPendingRebuild(owner: owner) })
            else { return }
            try await database.withCheckpointsPaused {
                try await database.run { try $0.rebuildWithoutDeletedBytes(owner: owner) }
            }
        } catch {
            diagnosticsCenter.report(
                .erasureUnfinished, error: SpoolError.bridge(error),
                "the rebuild after an erasure or reencryptAll() did not finish; the next start tries again")
        }
    }

    /// Withdraws the user's consent, as ``setConsent(_:)`` with `false`, and
    /// returns once nothing recorded before is left to upload.
    ///
    /// From the call on nothing is recorded, delivered or uploaded. An upload
    /// in flight is allowed to finish; then the upload queue is discarded —
    /// the uploader's position moves past every event recorded so far, in the
    /// database, so they are not uploaded when consent returns, in this
    /// process or the next.
    ///
    /// - Parameter erasingData: also erase everything else Spool keeps about
    ///   the user, as ``eraseAllData()`` does. The default, `false`, keeps
    ///   the local event history and durable-listener positions: withdrawing
    ///   consent stops collection, while erasure is a separate request the
    ///   app makes when the user asks for it (account deletion).
    public func withdrawConsent(erasingData: Bool = false) async throws {
        setConsent(false)
        await pendingDiscard()?.value
        if erasingData { try await eraseAllData() }
    }

    /// The discard a consent withdrawal started, while it runs.
    func pendingDiscard() -> Task<Void, Never>? {
        state.withLock { $0.uploads.discard }
    }

    /// Starts discarding the upload queue through the position `through`
    /// returns, after the discard already running, if any. Uploads are held
    /// until the latest discard is saved.
    func startDiscard(in state: inout State, through position: @escaping @Sendable () async throws -> Int64) {
        let previous = state.uploads.discard
        state.discards += 1
        let generation = state.discards
        // Unstructured: setConsent is synchronous; kept so withdrawConsent and flush await it.
        state.uploads = .discarding(
            Task {
                await previous?.value
                await self.discardUploads(generation: generation, through: position)
            })
    }

    /// Moves the uploader past the position `through` returns (the last event
    /// recorded before consent was withdrawn), with uploads held; tries
    /// again until it is saved or the engine closes, then lets uploads go on
    /// unless a later withdrawal started another discard.
    private func discardUploads(generation: Int, through position: @Sendable () async throws -> Int64) async {
        var delay: TimeInterval = 0.1
        while true {
            do {
                let through = try await position()
                try await quiescingUploads { try await uploaderBox.withLock { $0 }?.discard(through: through) }
                break
            } catch {
                guard state.withLock({ $0.isStarted }) else { break }
                diagnosticsCenter.report(
                    .uploadFailed, error: SpoolError.bridge(error),
                    "the upload queue could not be discarded after consent was withdrawn; uploads wait")
                await configuration.clock.sleep(seconds: delay)
                delay = min(delay * 2, 30)
            }
        }
        let latest = state.withLock { state -> Bool in
            guard state.discards == generation else { return false }
            state.uploads = .allowed
            return true
        }
        if latest { uploaderBox.withLock { $0 }?.requestFlushFromAnyThread() }
    }

    /// Runs `body` with no upload pass running (one in flight finishes first)
    /// and none starting until it returns.
    func quiescingUploads(_ body: () async throws -> Void) async throws {
        let uploader = uploaderBox.withLock { $0 }
        await uploader?.pause()
        do {
            try await body()
        } catch {
            await uploader?.resume()
            throw SpoolError.bridge(error)
        }
        await uploader?.resume()
    }
}
