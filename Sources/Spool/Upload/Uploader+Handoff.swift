import Foundation
import SpoolStorage

/// What the uploader needs to hand batches to the system's background
/// transfer service (``BackgroundTransfers``).
struct HandoffSettings: Sendable {
    let session: any BackgroundTransferSession
    /// The session's identifier, recorded with each hand-off.
    let identifier: String
    /// A hand-off with no report after this long is sent again.
    let resendAfter: TimeInterval
    /// True while the app is in the background: a batch due goes to the
    /// system instead of being sent by the app.
    let wanted: @Sendable () -> Bool
}

/// The directory beside the database that holds the bodies handed to the
/// system, one file per hand-off, named `<batch id>.body`.
struct TransferFiles: Sendable {
    let directory: URL
    /// Gives a body file the database's protection class and backup
    /// exclusion.
    let protect: @Sendable (String) throws -> Void

    init(databaseFile: URL, protect: @escaping @Sendable (String) throws -> Void) {
        directory = URL(fileURLWithPath: databaseFile.path + "-transfers", isDirectory: true)
        self.protect = protect
    }

    static func name(_ batchID: String) -> String { batchID + ".body" }

    func url(_ batchID: String) -> URL { directory.appendingPathComponent(Self.name(batchID)) }

    /// Writes `body` where the system's transfer reads it: owner only, like
    /// the database (the folder 0700, so no other user reaches a body even
    /// while it is being written; the file 0600).
    func write(_ body: Data, for batchID: String) throws {
        try FileManager.default.createDirectory(
            at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        _ = chmod(directory.path, 0o700)  // one made before, by any umask
        let file = url(batchID)
        try body.write(to: file, options: .atomic)
        _ = chmod(file.path, 0o600)
        try protect(file.path)
    }

    /// Deletes the bodies of the batches not in `kept`.
    ///
    /// - Returns: the paths that could not be deleted.
    @discardableResult
    func delete(keeping kept: Set<String> = []) -> [String] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        } catch {
            return []  // no directory: nothing was ever handed off
        }
        var left: [String] = []
        for name in names where !kept.contains(name) {
            let path = directory.appendingPathComponent(name).path
            do { try FileManager.default.removeItem(atPath: path) } catch { left.append(path) }
        }
        return left
    }
}

/// Handing batches to the system while the app is in the background, and
/// settling them when the system reports, in this launch or a later one.
/// The `background_transfers` row is the gate: a report or a send whose row
/// is gone settles nothing, so a hand-off is never settled twice.
extension Uploader {
    /// What to do with a hand-off found at the uploader's position.
    enum Outstanding {
        /// Its events are settled (or gone): read on.
        case next
        /// The collector took it; the position moves with the next read.
        case uploaded(first: Int64, last: Int64, batchID: String)
        /// It is with the system: the pass ends.
        case wait
    }

    /// Whether requests go through Spool's own HTTP transport: the only one
    /// a background session stands in for (a custom transport may pin
    /// certificates or use a proxy the system's session would not).
    nonisolated var sendsThroughBuiltInTransport: Bool {
        guard case .transport(let transport) = client.sender else { return false }
        return transport is HTTPTransport
    }

    /// From now on, batches due while `settings.wanted()` go to the system.
    func enableHandoffs(_ settings: HandoffSettings) {
        handoffs = settings
    }

    /// The system's answer to hand-off `batchID`: settled by the next pass.
    func receive(batchID: String, answer: UploadClient.Answer) {
        reports.append((batchID, answer))
        trigger(force: false)
    }

    /// Waits for a pass that settles the reports received so far (and, in
    /// the background, hands the next batch to the system).
    func settleReceived() async throws {
        try await waitForPass(force: false)
    }

    /// Writes `batch`'s request body to a file, records the hand-off, and
    /// gives it to the system.
    func handOff(_ batch: UploadBatch, _ handoffs: HandoffSettings) async throws {
        guard let files = transferFiles else { return }
        let tag = nextTag(for: batch)
        let batchID = tag.batchID
        let (request, compressed) = try await client.makeRequest(
            url: settings.url, body: batch.body, eventCount: batch.count, compress: compresses, tag: tag)
        try files.write(request.body, for: batchID)
        let handoff = Handoff(
            batchID: batchID, session: handoffs.identifier, positions: batch.positions,
            bodyFile: TransferFiles.name(batchID), compressed: compressed, handedAt: now)
        // Recorded before the system has it: no report names a batch the
        // database does not know.
        try log.database.onQueue { try $0.recordHandoff(handoff) }
        try give(handoff, request, to: handoffs)
    }

    /// Hands `handoff`'s body file to the system, with `request`'s headers
    /// (its batch id among them).
    private func give(_ handoff: Handoff, _ request: UploadRequest, to handoffs: HandoffSettings) throws {
        guard let files = transferFiles else { return }
        var request = request
        request.body = Data()  // the system reads the file
        do {
            try handoffs.session.upload(request, bodyFile: files.url(handoff.batchID), batchID: handoff.batchID)
        } catch {
            let reason = "the system did not take the background transfer: \(error)"
            try handoffFailed(handoff.batchID, reason: reason)
            throw SpoolError.uploadDeferred(reason: reason)
        }
    }

    /// A hand-off found at the uploader's position: settled already, with
    /// the system (the pass waits for its report), or due to be sent again —
    /// by the system in the background, by the app otherwise — with the
    /// same batch id and body.
    func resolve(_ handoff: Handoff) async throws -> Outstanding {
        if signals.withLock({ $0.position }) >= handoff.last {
            try forgetHandoff(handoff.batchID)
            return .next
        }
        let resendAfter = handoffs?.resendAfter ?? BackgroundTransfers.defaultResendAfter
        let due = !handoff.withSystem || now - handoff.handedAt >= resendAfter
        if let handoffs, handoffs.wanted() {
            guard due else { return .wait }
            let request = try await client.storedRequest(
                url: settings.url, body: Data(), compressed: handoff.compressed, eventCount: handoff.count,
                tag: try tag(handoff))
            let again = Handoff(
                batchID: handoff.batchID, session: handoffs.identifier, positions: handoff.positions,
                bodyFile: handoff.bodyFile, compressed: handoff.compressed, handedAt: now)
            try log.database.onQueue { try $0.recordHandoff(again) }
            try give(again, request, to: handoffs)
            return .wait
        }
        guard due else { return .wait }
        guard case .transport = client.sender, let files = transferFiles,
            let body = FileManager.default.contents(atPath: files.url(handoff.batchID).path),
            let batch = try reread(handoff)
        else {
            // Its body is gone (or no transport here to send it as it is):
            // its events go out again as a new batch.
            try forgetHandoff(handoff.batchID)
            return .next
        }
        try log.database.onQueue { try $0.countHandoffSend(handoff.batchID) }
        let stored = StoredBody(body: body, compressed: handoff.compressed, tag: try tag(handoff))
        let exchanged = await exchange(batch, compress: handoff.compressed, stored: stored)
        guard try await act(on: exchanged, for: batch, compress: handoff.compressed, handoff: handoff.batchID) else {
            return .next
        }
        return .uploaded(first: batch.first, last: batch.last, batchID: handoff.batchID)
    }

    /// Settles the next report the system delivered, if any.
    ///
    /// - Returns: nil when there was none; `.uploaded` when the collector
    ///   took the batch; `.next` otherwise.
    func settleNextReport() async throws -> Outstanding? {
        guard !reports.isEmpty else { return nil }
        let (batchID, answer) = reports.removeFirst()
        readGeneration = log.database.fileGeneration
        let found = try log.database.onQueue { connection -> (Handoff, UploadBatch?)? in
            guard let handoff = try connection.handoff(batchID) else { return nil }
            return (handoff, try self.reread(handoff, connection))
        }
        // Settled already (by the app's own send, or an earlier report), or
        // erased: nothing to do.
        guard let (handoff, batch) = found else { return .next }
        guard let batch, signals.withLock({ $0.position }) < handoff.last else {
            try forgetHandoff(batchID)  // its events are settled, or gone (bounds, consent)
            return .next
        }
        let exchanged = Exchange(
            answer: answer, compressed: handoff.compressed, duration: max(0, now - handoff.handedAt),
            sentAt: Date(timeIntervalSince1970: handoff.handedAt))
        guard try await act(on: exchanged, for: batch, compress: handoff.compressed, handoff: batchID) else {
            return .next
        }
        return .uploaded(first: batch.first, last: batch.last, batchID: batchID)
    }

    /// The tag of another send of `handoff`'s body: its batch id, its sends,
    /// and the loss its first send reported (recorded when it was read).
    private func tag(_ handoff: Handoff) throws -> UploadClient.Tag {
        let loss =
            client.writesLossInBody ? nil : try log.database.onQueue { try $0.carriedLoss(from: handoff.first) }
        return UploadClient.Tag(batchID: handoff.batchID, retries: handoff.sends, loss: loss?.headerValue)
    }

    /// The batch `handoff` carries, read again for the record and for
    /// splitting: its positions as sent, its events as they are now, the
    /// loss its body reported; nil when none is left.
    private nonisolated func reread(_ handoff: Handoff, _ connection: Connection) throws -> UploadBatch? {
        let loss = try connection.carriedLoss(from: handoff.first)
        guard
            case .batch(let read)? = try UploadBatch.read(
                after: handoff.first - 1, through: handoff.last, limit: handoff.count, anyFormat: client.format,
                clock: batchClock(), loss: loss, from: connection)
        else { return nil }
        return UploadBatch(
            body: read.body, positions: handoff.positions, firstID: read.firstID, lastID: read.lastID,
            idsJSON: read.idsJSON, loss: loss, lossInBody: read.lossInBody)
    }

    private func reread(_ handoff: Handoff) throws -> UploadBatch? {
        readGeneration = log.database.fileGeneration
        return try log.database.onQueue { try self.reread(handoff, $0) }
    }

    /// The last send of `batchID` ended without delivery: the next upload
    /// sends it again, with the same batch id.
    func handoffFailed(_ batchID: String, reason: String) throws {
        try log.database.onQueue { try $0.markHandoffFailed(batchID, report: reason) }
    }

    /// Ends hand-off `batchID`: its events are settled here, or go out again
    /// as a new batch.
    func forgetHandoff(_ batchID: String) throws {
        _ = try log.database.onQueue { try $0.deleteHandoff(batchID) }
        transferFiles?.delete(only: batchID)
    }

    /// Deletes the bodies no hand-off names any more (a salvage or an
    /// erasure in another process deleted their rows).
    func deleteOrphanedBodies() throws {
        guard let files = transferFiles else { return }
        let kept = try log.database.onQueue { try $0.allHandoffs() }.map { TransferFiles.name($0.batchID) }
        files.delete(keeping: Set(kept))
    }

    /// The data was erased (the rows went with it): cancels what the system
    /// holds and deletes every body.
    ///
    /// - Returns: the paths that could not be deleted.
    func eraseHandoffs() -> [String] {
        handoffs?.session.cancelAll()
        return transferFiles?.delete() ?? []
    }
}

extension TransferFiles {
    /// Deletes the body of `batchID`, if it is there.
    func delete(only batchID: String) {
        let path = url(batchID).path
        guard FileManager.default.fileExists(atPath: path) else { return }
        do {
            try FileManager.default.removeItem(atPath: path)
        } catch {
            // Left for the next start's sweep (``Uploader/deleteOrphanedBodies()``) and erasure.
        }
    }
}
