import Foundation
import SpoolStorage

/// Sending a batch and acting on the collector's answer (read by
/// Uploader+Reading.swift), compression negotiated on the way.
extension Uploader {
    /// One request and its answer.
    struct Exchange: Sendable {
        let answer: UploadClient.Answer
        let compressed: Bool
        let duration: TimeInterval
        let sentAt: Date
    }

    /// Sends one batch and settles its events. With `ahead`, the batches
    /// after it are read into `window` (the first read saving the accepted
    /// batch before it) while the request is in flight — or, while this
    /// batch's own gzip is still running, before it goes — and gzipped on
    /// another thread, or sent at once when more than one request may be in
    /// flight; the answer is acted on once that read is done, so the
    /// database sees the saves in log order. An answer that neither accepts
    /// the whole batch nor settles it per event is acted on once the
    /// requests sent beside it are answered and discarded.
    ///
    /// - Parameters:
    ///   - gzipped: the body being gzipped already (a batch read ahead).
    ///   - request: the request carrying `batch`, when it went already.
    /// - Returns: `accepted`: the collector took the whole batch (its
    ///   position is saved with the next read). `settledWhole`: not
    ///   accepted, but every event was settled here, per event, and the
    ///   position is past the batch, so the batches read ahead are still
    ///   next. Both false: settled here some other way (a bisection, a dead
    ///   letter), the window discarded.
    /// - Throws: ``SpoolError/uploadDeferred(reason:)`` when some must stay queued;
    ///   the read ahead's error once the answer is acted on.
    func send(
        _ batch: UploadBatch, gzipped: GzipJob? = nil, request: InFlightRequest? = nil,
        preparing ahead: ReadAhead? = nil, window: inout [Prepared]
    ) async throws -> (accepted: Bool, settledWhole: Bool) {
        var filled: Result<Void, any Error> = .success(())
        var toRead = ahead
        var compress = compresses
        var stored: StoredBody?
        if compress, let gzipped {
            // Its gzip still runs: the next batch is read meanwhile.
            if !gzipped.isDone, let early = toRead {
                toRead = nil
                filled = Result { try fill(&window, early) }
            }
            // Taken on this thread: gzipped here if the other thread has not
            // started it, else waited for (see GzipJob).
            if let body = gzipped.result() {
                stored = StoredBody(body: body, compressed: true, tag: nextTag(for: batch))
            }
        }
        var exchanged: Exchange
        if let request {
            if let late = toRead { filled = Result { try fill(&window, late) } }
            exchanged = await answer(to: request)
        } else {
            exchanged = await exchange(batch, compress: compress, stored: stored) {
                if let late = toRead { filled = Result { try fill(&window, late) } }
            }
        }
        var reading = read(exchanged.answer, eventCount: batch.count)
        if !window.isEmpty, !Self.keepsWindow(reading) { await discardWindow(&window) }
        if negotiatesCompression, !gzipTaken, exchanged.compressed, case .response(let response, _) = exchanged.answer,
            response.status == 400 || (response.status == 415 && !Self.acceptsGzip(response))
        {
            // Perhaps the collector cannot read gzip: the same batch once
            // more, uncompressed, before anything is split.
            counters.requests += 1
            counters.failedRequests += 1
            note(batch, exchanged, .retried, detail: UploadVerdict.describe(response) + "; sent again uncompressed")
            compress = false
            exchanged = await exchange(batch, compress: false)
            reading = read(exchanged.answer, eventCount: batch.count)
            if case .response(let plain, _) = exchanged.answer, (200..<300).contains(plain.status) {
                try learnGzipRefused(status: response.status)
            }
        }
        let accepted: Bool
        do {
            accepted = try await act(on: exchanged, for: batch, compress: compress, reading: reading)
        } catch {
            await discardWindow(&window)
            throw error
        }
        try filled.get()
        // Not accepted and nothing thrown with the window kept: a per-event
        // answer settled every event (none is left for a retry).
        return (accepted, !accepted && !window.isEmpty)
    }

    /// Acts on the answer to `batch`'s request. With `handoff` (the batch
    /// the system was given), the hand-off ends where the events are
    /// settled here, and stays, to be sent again, where they stay queued.
    ///
    /// `reading`: the answer read already (``read(_:eventCount:)``).
    ///
    /// - Returns: true when the collector took the whole batch (its position
    ///   is saved with the next read); false when it was settled here.
    /// - Throws: ``SpoolError/uploadDeferred(reason:)`` when some must stay
    ///   queued; ``SpoolError/suspended`` when the request was given up on
    ///   because the app's background time ran out.
    func act(
        on exchanged: Exchange, for batch: UploadBatch, compress: Bool, handoff: String? = nil,
        reading: Reading? = nil
    ) async throws -> Bool {
        let reading = reading ?? read(exchanged.answer, eventCount: batch.count)
        counters.requests += 1
        if let handoff {
            switch reading {
            case .accepted: break  // deleted with the position's save
            case .transient(let reason, _, _), .requestRefused(let reason, _, _):
                try handoffFailed(handoff, reason: reason)
            case .perEvent, .eventsRefused: try forgetHandoff(handoff)
            }
        }
        switch reading {
        case .accepted:
            note(batch, exchanged, .accepted)
            if exchanged.compressed { gzipTaken = true }
            largestAcceptedBody = max(largestAcceptedBody, batch.body.count)
            counters.uploaded += batch.count
            recovered()
            return true
        case .perEvent(let results, let status):
            note(batch, exchanged, .settledPerEvent)
            var outcomes: [Int64: EventOutcome] = [:]
            for (index, position) in batch.positions.enumerated() {
                outcomes[position] = EventOutcome(index < results.count ? results[index] : nil, status: status)
            }
            // A 2xx: the collector took the request, and the loss it reports.
            let settled = try settle(batch.positions, outcomes, acceptedFrom: batch.first)
            if outcomes.values.contains(where: { if case .rejected = $0 { true } else { false } }) {
                counters.failedRequests += 1
            }
            if let retry = settled.retry { try backOff(retry, retryAfter: nil, events: settled.left) }
            recovered()
            return false
        case .transient(let reason, _, _) where reason == Self.abandonedReason:
            // The app's background time ran out, not the collector: no
            // backoff, and the events go out with the next pass.
            note(batch, exchanged, .retried, detail: reason)
            counters.failedRequests += 1
            try saveNotes()
            throw SpoolError.suspended
        case .transient(let reason, let retryAfter, _):
            note(batch, exchanged, .retried, detail: reason)
            try backOff(reason, retryAfter: retryAfter, events: batch.count)
        case .requestRefused(let reason, let retryAfter, _):
            note(batch, exchanged, .heldBack, detail: reason)
            try holdBack(reason, retryAfter: retryAfter, events: batch.count)
        case .eventsRefused(let reason, let status, let singled):
            counters.failedRequests += 1
            if batch.count == 1 && singled {
                // The format's reading names this very event.
                note(batch, exchanged, .deadLettered, detail: reason)
                try settle(batch.positions, [batch.first: .rejected(reason, status: status)])
                recovered()
                return false
            }
            note(batch, exchanged, .bisected, detail: reason)
            try await bisect(batch, status: status, reason: reason, compress: compress)
            return false
        }
    }

    /// The collector took uncompressed what it refused gzipped: no gzip to
    /// this URL from now on, in later launches too.
    private func learnGzipRefused(status: Int) throws {
        compresses = false
        let (url, now) = (settings.url.absoluteString, now)
        try log.database.onQueue { try $0.markCollectorRefusesGzip(url, at: now) }
        diagnostics.report(
            .compressionTurnedOff,
            "the collector answered a gzip body with HTTP \(status) and took the same batch uncompressed; "
                + "requests to \(url) are no longer compressed")
    }

    /// A body built earlier, sent as it is: a batch handed to the system,
    /// sent again by the app.
    struct StoredBody: Sendable {
        let body: Data
        let compressed: Bool
        let tag: UploadClient.Tag
    }

    /// The tag of the next send of `batch`: its key, and how many times this
    /// process sent it before (a retry reads the same events again).
    func nextTag(for batch: UploadBatch) -> UploadClient.Tag {
        let key = batch.key
        var retries = 0
        if let index = sends.lastIndex(where: { $0.key == key }) {
            retries = sends.remove(at: index).count
        } else if sends.count == Self.remembersSends {
            sends.removeFirst()
        }
        sends.append((key, retries + 1))
        return UploadClient.Tag(batchID: key, retries: retries, loss: batch.lossHeader)
    }

    /// How many batches' sends are remembered: more than the requests of a
    /// bisection of the largest batch, between two sends of the batch it
    /// split (2·⌈log2(n)⌉ for n events: 20 for 1,000).
    static let remembersSends = 64

    /// Builds the request and sends it through the client's transport or
    /// dispatcher, waiting at most `dispatchTimeout` (a later answer is
    /// ignored: the lease must outlive every request). With `stored`, that
    /// body goes instead, through the transport, under its batch id.
    /// `meanwhile` runs once the request is out.
    func exchange(_ batch: UploadBatch, compress: Bool, stored: StoredBody? = nil, meanwhile: () -> Void = {})
        async -> Exchange
    {
        let request = startExchange(batch, compress: compress, stored: stored)
        meanwhile()
        return await answer(to: request)
    }

    /// The failure a request given up on for the app's suspension gets.
    static let abandonedReason = "abandoned: the app's background time ran out"

    /// Waits for the answer to `request` (or its timeout, or its abandon).
    func answer(to request: InFlightRequest) async -> Exchange {
        let answer = await withCheckedContinuation { request.deliver(to: $0) }
        inFlight.withLock { $0.abandon[ObjectIdentifier(request)] = nil }
        let compressed: Bool
        if case .response(_, let gzipped) = answer {
            compressed = gzipped
        } else {
            compressed = request.compressed
        }
        let duration = max(0, now - request.sentAt)
        return Exchange(
            answer: answer, compressed: compressed, duration: duration,
            sentAt: Date(timeIntervalSince1970: request.sentAt))
    }

    /// Sends `batch` (``exchange(_:compress:stored:meanwhile:)``) without
    /// waiting for its answer.
    func startExchange(_ batch: UploadBatch, compress: Bool, stored: StoredBody? = nil) -> InFlightRequest {
        let request = InFlightRequest(sentAt: now, compressed: stored?.compressed ?? compress)
        let finish: @Sendable (UploadClient.Answer) -> Void = { request.finish($0) }
        let abandon: @Sendable () -> Void = { request.stop(answering: .failed(Self.abandonedReason)) }
        // The background time ran out: none goes out.
        if isOutOfTime {
            abandon()
            return request
        }
        let (client, url, timeout) = (self.client, settings.url, settings.dispatchTimeout)
        let tag = stored?.tag ?? nextTag(for: batch)
        let sender: String
        if case .dispatcher = client.sender { sender = "dispatcher" } else { sender = "transport" }
        // Once the request is out: unless it was answered at once (then it
        // needs neither a way to abandon it nor a timer), `stop` is what
        // stops it early, the app's suspension abandons it (at once when
        // the time ran out as it went), and the dispatch timeout gives up on
        // it.
        let watch: @Sendable (@escaping @Sendable () -> Void) -> Void = { [inFlight, log] stop in
            guard request.watch(stop) else { return }
            let outOfTime = inFlight.withLock { requests in
                if requests.expiredHolds == 0 { requests.abandon[ObjectIdentifier(request)] = abandon }
                return requests.expiredHolds > 0
            }
            // Sent as the time ran out: given up on at once.
            if outOfTime { return abandon() }
            // Answered meanwhile: `answer(to:)` may have let go of it already.
            if request.isAnswered { inFlight.withLock { $0.abandon[ObjectIdentifier(request)] = nil } }
            // A dispatch timer: it touches no database state, so it fires
            // while suspended without asking for a background window.
            log.database.timer(after: timeout) { _ in
                request.stop(answering: .failed("no answer from the \(sender) within \(Int(timeout)) s"))
            }
        }
        switch client.sender {
        case .dispatcher(let dispatcher):
            let event = EventForDispatch(url: url, body: batch.body, eventCount: batch.count)
            // Unstructured and detached: the dispatcher is the app's code,
            // which never runs on the database queue; the queue reads the
            // next batch meanwhile. It answers through `finish`.
            Task.detached {
                dispatcher.dispatchEvent(event: event) { finish(UploadClient.answer($0)) }
                watch({})
            }
        case .transport(let transport):
            let compressed = stored?.compressed ?? false
            if stored != nil || !compress, let callback = client.callbackTransport,
                let immediate = client.immediateRequest(
                    url: url, body: stored?.body ?? batch.body, compressed: compressed, eventCount: batch.count,
                    tag: tag)
            {
                // Nothing to do off the database queue (the body is final, no
                // header provider): sent from here, and the answer comes back
                // with one hop.
                watch(callback.send(immediate) { finish(UploadClient.answer($0, compressed: compressed)) })
            } else if let stored {
                let task = Task {
                    finish(
                        await client.exchangeStored(
                            through: transport, url: url, body: stored.body, compressed: stored.compressed,
                            eventCount: batch.count, tag: tag))
                }
                watch { task.cancel() }
            } else {
                // A task, not structured work: gzip and the header provider
                // run off the database queue, and a transport that ignores
                // cancellation must not hold the uploader past its timeout.
                let task = Task {
                    finish(
                        await client.exchange(
                            through: transport, url: url, body: batch.body, eventCount: batch.count,
                            compress: compress, tag: tag))
                }
                watch { task.cancel() }
            }
        }
        return request
    }
}
