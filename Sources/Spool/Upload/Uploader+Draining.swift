import Foundation
import SpoolStorage

/// A flush pass: read a batch under the lease, send it, save what the
/// collector took, in one transaction with the next read.
extension Uploader {
    /// What one read under the lease found.
    enum Step {
        case batch(UploadBatch)
        /// The next event is over the format's per-event limit.
        case oversized(position: Int64, bytes: Int)
        case empty
        case heldElsewhere(ConsumerLease)
        /// Uploads are paused (``EventEngine/pauseUploads()``).
        case paused
        /// The batch at the position was handed to the system.
        case handedOff(Handoff)

        var isPaused: Bool {
            if case .paused = self { return true }
            return false
        }

        /// Anything but a batch to send ends the pass.
        var endsPass: Bool {
            if case .batch = self { return false }
            return true
        }
    }

    func drain(force: Bool) async throws {
        // The batches read ahead: a pass ends only once the requests among
        // them that went are answered.
        var window: [Prepared] = []
        do {
            try await drain(force: force, window: &window)
        } catch {
            await discardWindow(&window)
            throw error
        }
        await discardWindow(&window)
    }

    private func drain(force: Bool, window: inout [Prepared]) async throws {
        // Each database call saves the previous batch's success, renews the
        // lease and reads the next batch, in one transaction; while a request
        // is in flight, the batches after it are read that way, gzipped or
        // sent (``send(_:gzipped:request:preparing:window:)``), and sent or
        // settled next if the answer leaves them next
        // (``takePrepared(_:after:)``).
        var uploaded: (first: Int64, last: Int64)?
        // The hand-off whose events `uploaded` are: deleted with the save.
        var settled: String?
        // The last event of a batch settled whole here, per event: the
        // batches read ahead of it are still next.
        var settledThrough: Int64?
        // `pauses`: erasure, a consent withdrawal or a pause waits for the
        // requests in flight only.
        while schedule.passMayContinue {
            guard isAllowed() else { break }  // nothing is uploaded while opted out
            // The background time ran out: what waits goes out with the next.
            guard !isOutOfTime else { throw SpoolError.suspended }
            if uploaded == nil, let outcome = try await settleNextReport() {
                if case .uploaded(let first, let last, let batchID) = outcome {
                    (uploaded, settled) = ((first, last), batchID)
                }
                continue
            }
            // Offline, metered under the policy, backing off: what lifts
            // the hold (the path, the policy, the retry timer) triggers the
            // next pass.
            switch schedule.gate(force: force, now: now) {
            case .go: break
            case .endPass:
                await discardWindow(&window)
                return try saveAndEnd(uploaded, settled)
            case .refuse(let reason): throw SpoolError.uploadDeferred(reason: reason)
            }
            let ready = try await takePrepared(&window, after: uploaded?.last ?? settledThrough)
            settledThrough = nil
            let step: Step
            if let ready {
                step = .batch(ready.batch)  // `uploaded` is saved by the next read
            } else {
                step = try saveAndRead(uploaded, handoff: settled)
                (uploaded, settled) = (nil, nil)
            }
            switch step {
            case .empty:
                // Drained: the file gives back what the queue no longer needs.
                log.scheduleShrink()
                return
            case .heldElsewhere(let lease):
                throw heldElsewhere(lease)
            case .paused:
                if case .refuse(let reason) = schedule.pausedInDatabase(force: force) {
                    throw SpoolError.uploadDeferred(reason: reason)
                }
                return
            case .oversized(let position, let bytes):
                try deadLetterOversized(at: position, bytes: bytes)
            case .handedOff(let handoff):
                switch try await resolve(handoff) {
                case .next: break
                case .uploaded(let first, let last, let batchID): (uploaded, settled) = ((first, last), batchID)
                case .wait: return try waitForSystem(handoff, force: force)
                }
            case .batch(let batch):
                if let handoffs, handoffs.wanted() {
                    try await handOff(batch, handoffs)
                    return try waitForSystem(nil, force: false, saving: uploaded, settled: settled)
                }
                // The read ahead saves what waits to be saved; with nothing
                // after this batch and those read ahead it is not asked for.
                let readFrom = window.last?.batch.last ?? batch.last
                let ahead =
                    uploaded != nil || signals.withLock({ $0.head }) > readFrom
                    ? ReadAhead(after: batch.last, saving: uploaded, handoff: settled) : nil
                let sent = try await send(
                    batch, gzipped: ready?.gzipped, request: ready?.request, preparing: ahead, window: &window)
                if ahead != nil { (uploaded, settled) = (nil, nil) }
                if sent.accepted { uploaded = (batch.first, batch.last) }
                if sent.settledWhole { settledThrough = batch.last }
            }
        }
        await discardWindow(&window)
        try saveAndEnd(uploaded, settled)
    }

    /// The pass ends: saves what the collector took, if anything, or the
    /// records of its requests.
    private func saveAndEnd(_ uploaded: (first: Int64, last: Int64)?, _ settled: String?) throws {
        if let uploaded { _ = try saveAndRead(uploaded, handoff: settled, read: false) } else { try saveNotes() }
    }

    /// The batch the system was given is settled by its report: the pass
    /// ends, giving the lease up. An explicit flush hears why its events
    /// are still queued.
    private func waitForSystem(
        _ handoff: Handoff?, force: Bool, saving uploaded: (first: Int64, last: Int64)? = nil, settled: String? = nil
    ) throws {
        _ = try saveAndRead(uploaded, handoff: settled, read: false)
        guard force, let handoff else { return }
        throw SpoolError.uploadDeferred(
            reason: "\(handoff.count) events are with the system's background transfer (batch \(handoff.batchID)); "
                + "they are settled when it reports")
    }

    /// Throws a retryable error when the file was salvaged since the last
    /// batch was read: the positions this flush holds are the old file's
    /// (the salvage closed them up). The batch is read and sent again.
    func checkSameFileAsRead() throws {
        guard log.database.fileGeneration == readGeneration else {
            throw SpoolError.uploadDeferred(
                reason: "the database file was salvaged while a batch was in flight; it is sent again")
        }
    }

    /// Another process holds the lease: retry when it is free.
    func heldElsewhere(_ lease: ConsumerLease) -> SpoolError {
        armRetryTimer(schedule.leaseHeldElsewhere(until: lease.expires, now: now))
        return SpoolError.uploadDeferred(reason: "another process (\(lease.owner)) is uploading")
    }

    /// In one transaction: saves the uploader's position at `through`
    /// (deleting the prefix every consumer finished), takes or renews the
    /// lease, and reads the next batch after the position *in the database*.
    /// With nothing left to send the lease is given up. The records of
    /// earlier requests are written with it once ``recordsPerWrite`` wait,
    /// or when the pass ends. With `handoff`, the batch the system was given
    /// (`uploaded`'s events), its row is deleted in the same transaction and
    /// its body after it.
    func saveAndRead(_ uploaded: (first: Int64, last: Int64)?, handoff: String? = nil, read: Bool = true) throws
        -> Step
    {
        // A batch read from a file that was since salvaged (positions closed
        // up) is not saved: its positions are not the new file's. Its events
        // are sent again (at least once).
        let generation = log.database.fileGeneration
        let uploaded = generation == readGeneration ? uploaded : nil
        readGeneration = generation
        return try save(uploaded, handoff: handoff, thenRead: read ? .atPosition : nil)
    }

    /// Where ``save(_:handoff:thenRead:)`` reads once it has saved.
    enum ReadPoint: Equatable {
        /// After the position in the database; the lease is given up when
        /// the pass ends.
        case atPosition
        /// After `last`, the batch in flight (or after the position, when the
        /// queue bound moved it further); the lease is kept for that request.
        case after(Int64)
    }

    /// ``saveAndRead(_:handoff:read:)``'s transaction, reading at `point`
    /// (nil: nothing, and the lease is given up).
    func save(_ uploaded: (first: Int64, last: Int64)?, handoff: String?, thenRead point: ReadPoint?) throws -> Step {
        let (consumer, owner, settings, format) = (Self.consumerID, self.owner, self.settings, client.format)
        let records = unsavedRecords
        let lossCounted = signals.withLock { $0.lossCounted }
        let (step, position, head, passed, wroteRecords, settled) = try log.database.onQueue { connection in
            try connection.transaction { () -> (Step, Int64, Int64, Int64, Bool, Bool) in
                var passed: Int64 = 0
                var settled = false
                if let uploaded {
                    // Events the queue bound dropped while their request was
                    // in flight are counted as dropped, not uploaded as well.
                    let before = try connection.position(of: consumer) ?? 0
                    passed = max(0, min(before, uploaded.last) - uploaded.first + 1)
                    try connection.advanceConsumerInTransaction(consumer, to: uploaded.last)
                    // The hand-off is settled with its position: never twice.
                    if let handoff { settled = try connection.deleteHandoff(handoff) }
                    // And the loss the request reported, in the same transaction.
                    if lossCounted { try connection.settleLoss(accepted: uploaded.first, through: uploaded.last) }
                    try connection.forgetBatchBounds(through: uploaded.last)
                }
                let position = try connection.position(of: consumer) ?? 0
                let head = try connection.headPosition()
                let step = try nextStep(point, position, connection, consumer, owner, settings, format)
                // The records of requests are written in groups, and when the
                // pass ends: each write rewrites the newest and the oldest
                // pages of `upload_batches`, whose rows are a few kilobytes.
                let write = !records.isEmpty && (step.endsPass || records.count >= Self.recordsPerWrite)
                if write { try connection.recordUploadBatches(records) }
                return (step, position, head, passed, write, settled)
            }
        }
        if wroteRecords { recordsWritten(records.count) }
        if settled, let handoff { transferFiles?.delete(only: handoff) }
        if point != nil { signals.withLock { $0.paused = step.isPaused } }
        counters.uploaded -= Int(passed)
        signals.withLock { signals in
            signals.position = position
            signals.head = max(signals.head, head)
        }
        return step
    }

    /// How many requests' records wait in memory before they are written to
    /// `upload_batches`; a pass writes what waits when it ends.
    static let recordsPerWrite = 16

    /// Inside the transaction of ``save(_:handoff:thenRead:)``: takes or
    /// renews the lease and reads the batch at `point`; with nothing to read
    /// there (or `point` nil: the pass ends), gives the lease up, unless a
    /// request is in flight (`.after`).
    private nonisolated func nextStep(
        _ point: ReadPoint?, _ position: Int64, _ connection: Connection, _ consumer: String, _ owner: String,
        _ settings: Settings, _ format: any BatchFormat
    ) throws -> Step {
        guard let point else {
            try connection.releaseLease(consumer, owner: owner)
            return .empty
        }
        let ending = point == .atPosition
        // One query for the pause, the hand-offs and the loss to report:
        // all are rare, and this runs for every batch.
        let gates = try connection.uploadGates()
        signals.withLock { $0.lossCounted = gates.lossCounted }
        if gates.paused {
            if ending { try connection.releaseLease(consumer, owner: owner) }
            return .paused
        }
        if let lease = try connection.acquireLease(
            consumer, owner: owner, now: now, duration: settings.leaseDuration)
        {
            return .heldElsewhere(lease)
        }
        if gates.handedOff, let handoff = try connection.oldestHandoff() { return .handedOff(handoff) }
        var after = position
        if case .after(let last) = point { after = max(position, last) }
        // A batch read before from the same first event ends where it did,
        // whatever this engine's batch size (another process's, a relaunch
        // with another setting): a retry carries the same events under the
        // same key (W3).
        let bound = try connection.batchBound(after: after)
        guard let first = bound.first else {
            if ending { try connection.releaseLease(consumer, owner: owner) }
            return .empty
        }
        // What the request reports: read in this transaction, which records
        // it as this request's (see `lossToCarry`).
        let loss = gates.lossCounted ? try connection.lossToCarry(from: first) : LossCounts()
        let limit = bound.through.map { Int(clamping: $0 - first + 1) } ?? settings.batchSize
        switch try UploadBatch.read(
            after: after, through: bound.through ?? .max, limit: limit, anyFormat: format,
            clock: batchClock(), loss: loss, from: connection)
        {
        case .batch(let batch)?:
            // Every batch notes where it ends, in the transaction that reads
            // it: one that ended at the log's end or the body's byte bound
            // would otherwise take events recorded since, and a full one
            // another engine's batch size.
            try connection.noteBatchBound(first: batch.first, last: batch.last)
            return .batch(batch)
        case .oversized(let at, let bytes)?: return .oversized(position: at, bytes: bytes)
        case nil:
            if ending { try connection.releaseLease(consumer, owner: owner) }
            return .empty
        }
    }
}
