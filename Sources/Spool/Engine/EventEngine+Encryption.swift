import Foundation
import SpoolStorage

// MARK: - Re-sealing the backlog

extension EventEngine {
    /// How many rows one transaction of ``reencryptAll()`` seals again:
    /// recording and uploads go on between them.
    static let resealChunkRows = 256

    /// Seals every stored value again with the key provider's current key:
    /// the events, dead letters, identities and contexts sealed with an
    /// older key, and those written readable before encryption was turned
    /// on.
    ///
    /// The current key is asked of the provider first; values sealed from
    /// then on use it. The backlog is sealed again in transactions of 256
    /// rows, with SQLite's secure delete on; then the WAL is checkpointed
    /// and the file rebuilt with its live pages only (`VACUUM`, as
    /// ``eraseAllData()`` does), so neither the bytes replaced nor those of
    /// rows deleted earlier stay in the files; a rebuild that does not finish
    /// (the app killed during the call) is finished by the next `start()`. An
    /// event whose value will not open moves to the dead letters with
    /// reason `undecryptable` (``SpoolDiagnostic/Kind/undecryptableRows``).
    ///
    /// To rotate: make ``EncryptionKeyProvider/currentKey()`` return the
    /// new key, call this, and drop the old key once it returns. Other
    /// processes using the file (app extensions) ask their provider for the
    /// current key before they next seal a value after the call starts, so their
    /// provider must return the new key by then too (a shared keychain
    /// item); until it does, they seal with the key they have, report a
    /// ``SpoolDiagnostic/Kind/encryptionKeyNotFollowed`` diagnostic and ask
    /// again a minute later.
    ///
    /// - Throws: ``SpoolError/notEncrypted`` without
    ///   ``EngineConfiguration/encryption``; ``SpoolError/notStarted``;
    ///   ``SpoolError/encryptionKeyUnavailable(_:)`` when the provider
    ///   gives no current key (nothing was changed).
    public func reencryptAll() async throws -> ReencryptionReport {
        guard let sealer else {
            throw SpoolError.notEncrypted
        }
        guard let log = state.withLock({ $0.isStarted ? $0.log : nil }) else { throw SpoolError.notStarted }
        let keyID = try SpoolError.bridging { try sealer.refreshCurrentKey() }
        let clock = configuration.clock
        let counts = Protected((resealed: 0, undecryptable: 0))
        let owner = leaseOwner
        try await SpoolError.bridgingAsync {
            try await withDatabaseAwake {
                // Other processes using the file seal with it from their next
                // commit on (they ask their provider for the current key).
                // Rows sealed again leave their earlier bytes until the
                // rebuild below; a start finishes it if this does not.
                try await log.database.run {
                    try $0.noteCurrentKey(keyID)
                    try $0.notePendingRebuild(at: clock.now, owner: owner)
                }
                try await self.resealAndRebuild(log, owner: owner, counts: counts)
            }
        }
        let (resealed, undecryptable) = counts.withLock { ($0.resealed, $0.undecryptable) }
        return ReencryptionReport(keyID: keyID, resealed: resealed, undecryptable: undecryptable)
    }

    /// ``reencryptAll()``'s work once the rebuild is noted for `owner`: on
    /// any failure the note is let go, for the next start to finish.
    private func resealAndRebuild(
        _ log: EventLog, owner: String, counts: Protected<(resealed: Int, undecryptable: Int)>
    ) async throws {
        let clock = configuration.clock
        do {
            for table in Connection.ResealedTable.allCases {
                var after = Int64.min
                while true {
                    let start = after
                    let chunk = try await log.database.run {
                        try $0.resealChunk(table, after: start, limit: Self.resealChunkRows, now: clock.now)
                    }
                    counts.withLock {
                        $0.resealed += chunk.resealed
                        $0.undecryptable += chunk.undecryptable
                    }
                    guard let last = chunk.last else { break }
                    after = last
                }
            }
            // Rows deleted before (uploaded, dropped by a bound) left their
            // readable bytes in pages a routine delete does not write
            // again: the file is rebuilt, as an erasure rebuilds it, with
            // the background checkpoints paused.
            try await log.database.withCheckpointsPaused {
                try await log.database.run { try $0.rebuildWithoutDeletedBytes(owner: owner) }
            }
        } catch {
            // A note a closing queue cannot let go stays with this process,
            // and the first start after it ends finishes the rebuild.
            _ = try? await log.database.run { $0.releasePendingRebuild(owner: owner) }  // try?: nothing is lost
            throw error
        }
    }
}
