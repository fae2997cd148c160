import Foundation
import SpoolStorage

/// Pipelined preparation: while a request is in flight, the batch after it
/// is read (in the transaction that saves the batch before it) and gzipped
/// on another thread, so the next request goes as soon as the answer allows.
/// While the request's own body is still being gzipped, the read comes
/// first, so that reading and gzipping overlap when answers come at once.
///
/// One request is in flight at a time, so the collector receives events in
/// log order and answers are settled in log order. The batch read ahead is
/// sent only when the answer leaves it next: the request before it was
/// accepted whole, the file is the one it was read from, and the database
/// says that none of its events has passed (the queue bound, an erasure in
/// another process), that uploads are not paused and that the lease is
/// still this engine's for a whole request. Anything else — a retry, a
/// bisection, dead letters, a refusal of the request, `stop()`, a pause, a
/// consent withdrawal, an erasure, another process's lease — discards it,
/// and the next batch is read again from the position in the database: the
/// same events make the same batch, under the same batch id.
extension Uploader {
    /// A batch read, and gzipped when requests are, while the request
    /// before it was in flight.
    struct Prepared: Sendable {
        /// The last position of the batch it follows.
        let after: Int64
        let batch: UploadBatch
        /// The database file it was read from (``DatabaseQueue/fileGeneration``).
        let generation: Int
        /// Its body being gzipped on another thread; nil when requests are
        /// not gzipped (or not through a transport).
        let gzipped: GzipJob?
    }

    /// What to read ahead of the request in flight, and the accepted batch
    /// before it that the same transaction saves.
    struct ReadAhead: Sendable {
        /// The last position of the batch in flight.
        let after: Int64
        let saving: (first: Int64, last: Int64)?
        /// The hand-off whose events `saving` are.
        let handoff: String?
    }

    /// How the read ahead went, for the tests.
    struct PipelineCounts: Sendable {
        /// Batches read while the request before them was in flight.
        var prepared = 0
        /// Of those, the batches sent as read.
        var sent = 0
        /// Of those, the batches discarded: the answer changed what comes
        /// next, or the pass ended.
        var discarded = 0
    }

    /// Where bodies read ahead are gzipped while the database queue goes
    /// on: one serial queue, so that a gzip never competes with another
    /// for the cores the database queue needs.
    static let compression = DispatchQueue(label: "spool.gzip", qos: .utility)

    /// In the transaction that saves `ahead.saving`: renews the lease and
    /// reads the batch after the one in flight, keeping the lease whatever
    /// it finds (the request in flight needs it). The body is gzipped on
    /// another thread.
    ///
    /// - Returns: nil when the read found anything but a batch.
    func readAhead(_ ahead: ReadAhead) throws -> Prepared? {
        // A salvage since the batch in flight was read: its predecessor's
        // positions are not the new file's (not saved), and what is read now
        // is discarded before it is sent.
        let generation = log.database.fileGeneration
        let saving = generation == readGeneration ? ahead.saving : nil
        guard case .batch(let batch) = try save(saving, handoff: ahead.handoff, thenRead: .after(ahead.after))
        else { return nil }
        pipeline.withLock { $0.prepared += 1 }
        var gzipped: GzipJob?
        if compresses, case .transport = client.sender {
            gzipped = GzipJob(batch.body, on: Self.compression)
        }
        return Prepared(after: ahead.after, batch: batch, generation: generation, gzipped: gzipped)
    }

    /// Takes `prepared` if it is still the next batch to send after
    /// `uploaded` (the batch whose request was accepted whole), checking in
    /// the database that none of its events has passed, that uploads are
    /// not paused and that the lease is this engine's for a whole request
    /// more. Otherwise it is discarded, and nil says: read the next batch.
    func takePrepared(_ prepared: inout Prepared?, after uploaded: (first: Int64, last: Int64)?) throws -> Prepared? {
        guard let ready = prepared else { return nil }
        prepared = nil
        guard let uploaded, ready.after == uploaded.last, ready.batch.first > uploaded.last,
            ready.generation == readGeneration,
            ready.generation == log.database.fileGeneration, !(handoffs?.wanted() ?? false)
        else {
            discard(ready)
            return nil
        }
        let (consumer, owner, patience) = (Self.consumerID, self.owner, settings.dispatchTimeout)
        let found: (position: Int64, lease: ConsumerLease?, uploadsPaused: Bool)?
        do {
            found = try log.database.onQueue { try $0.standing(of: consumer) }
        } catch {
            discard(ready)
            throw error
        }
        guard let standing = found, !standing.uploadsPaused, standing.position < ready.batch.first,
            let lease = standing.lease, lease.owner == owner, lease.expires >= now + patience
        else {
            discard(ready)
            return nil
        }
        pipeline.withLock { $0.sent += 1 }
        return ready
    }

    /// A batch read ahead that is not sent as read.
    func discard(_ prepared: Prepared) {
        pipeline.withLock { $0.discarded += 1 }
    }
}
