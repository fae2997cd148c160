import Foundation
import SpoolStorage

/// Sending a batch and acting on the collector's answer: the format's
/// verdict, events settled one by one, dead letters, and what a 415 says
/// about gzip.
extension Uploader {
    /// Sends one batch and acts on the format's verdict on the answer.
    ///
    /// - Returns: true when the collector took the whole batch (its position
    ///   is saved with the next read); false when it was split, settled per
    ///   event or dead-lettered (already saved).
    /// - Throws: ``UploadError/retryable(_:)`` when some must stay queued.
    func send(_ batch: UploadBatch) async throws -> Bool {
        let answer = await exchange(batch)
        counters.requests += 1
        guard case .response(let response, let compressed) = answer else {
            if case .failed(let reason) = answer { try backOff(reason, retryAfter: nil, events: batch.count) }
            return false
        }
        let status = response.status
        if (300..<400).contains(status) || status < 200 {
            // A redirect (or an interim answer) is never success and never a
            // reason to give up on the events, whatever the format says.
            try backOff(
                UploadVerdict.describe(response), retryAfter: status < 200 ? response.retryAfter : nil,
                events: batch.count)
        }
        if compressed && status == 415 && !Self.acceptsGzip(response) {
            // The collector cannot read gzip (RFC 7694: a 415 that does not
            // list gzip in Accept-Encoding). Identity from now on, and this
            // batch again at once.
            compresses = false
            counters.failedRequests += 1
            return try await send(batch)
        }
        var verdict = client.format.verdict(for: response, eventCount: batch.count)
        if !(200..<300).contains(status) {
            switch verdict {
            case .accepted, .perEvent:
                // Only a 2xx answer is delivery.
                verdict = .retry(reason: UploadVerdict.describe(response), retryAfter: response.retryAfter)
            case .retry, .split, .rejected: break
            }
        }
        switch verdict {
        case .accepted:
            counters.uploaded += batch.count
            recovered()
            return true
        case .retry(let reason, let retryAfter):
            try backOff(reason, retryAfter: retryAfter, events: batch.count)
        case .split(let reason):
            // Too large, or something in it is refused: split to isolate.
            counters.failedRequests += 1
            if batch.count == 1 {
                try deadLetter(after: batch.first - 1, count: 1, status: status, reason: reason)
            } else {
                let half = batch.count / 2
                try await sendRange(after: batch.first - 1, count: half)
                try await sendRange(after: batch.positions[half - 1], count: batch.count - half)
            }
            return false
        case .rejected(let reason):
            // The collector will never take these.
            counters.failedRequests += 1
            try deadLetter(after: batch.first - 1, count: batch.count, status: status, reason: reason)
            return false
        case .perEvent(let results):
            try settle(batch, results: results, status: status)
            return false
        }
    }

    /// Sends the `count` events after `position`, saving each success at once.
    /// Each read renews the lease, as the drain's reads do: a split can take
    /// many requests.
    func sendRange(after position: Int64, count: Int) async throws {
        let (consumer, format) = (Self.consumerID, client.format)
        let (owner, leaseDuration) = (self.owner, settings.leaseDuration)
        var after = position
        var remaining = count
        while remaining > 0 {
            let (start, limit) = (after, remaining)
            let (read, heldBy) = try log.database.onQueue { connection in
                try connection.transaction { () -> (UploadBatch.Read?, ConsumerLease?) in
                    if let lease = try connection.acquireLease(
                        consumer, owner: owner, now: Date().timeIntervalSince1970, duration: leaseDuration)
                    {
                        return (nil, lease)
                    }
                    let read = try UploadBatch.read(after: start, limit: limit, anyFormat: format, from: connection)
                    return (read, nil)
                }
            }
            if let heldBy { throw heldElsewhere(heldBy) }
            switch read {
            case nil:
                return
            case .oversized(let at, let bytes)?:
                try deadLetterOversized(at: at, bytes: bytes)
                after = at
                remaining -= 1
            case .batch(let batch)?:
                if try await send(batch) {
                    let last = batch.last
                    _ = try log.database.onQueue { try $0.advanceConsumer(consumer, to: last) }
                    signals.withLock { $0.position = max($0.position, last) }
                }
                after = batch.last
                remaining -= batch.count
            }
        }
    }

    /// Builds the request and sends it through the client's transport or
    /// dispatcher, waiting at most `dispatchTimeout` (a later answer is
    /// ignored: the lease must outlive every request).
    func exchange(_ batch: UploadBatch) async -> UploadClient.Answer {
        let (client, url, compress, timeout) = (self.client, settings.url, compresses, settings.dispatchTimeout)
        let answer = await withCheckedContinuation { continuation in
            let once = Protected(false)
            let finish: @Sendable (UploadClient.Answer) -> Void = { answer in
                let first = once.withLock { answered in
                    defer { answered = true }
                    return !answered
                }
                if first { continuation.resume(returning: answer) }
            }
            // What stops the request early, and who was asked.
            let cancel: @Sendable () -> Void
            let sender: String
            switch client.sender {
            case .dispatcher(let dispatcher):
                // Called from here, as before there were transports: a
                // dispatcher that answers at once costs no thread hop.
                (cancel, sender) = ({}, "dispatcher")
                let event = EventForDispatch(url: url, body: batch.body, eventCount: batch.count)
                dispatcher.dispatchEvent(event: event) { finish(UploadClient.answer($0)) }
            case .transport(let transport):
                sender = "transport"
                if !compress, let callback = client.callbackTransport,
                    let request = client.immediateRequest(url: url, body: batch.body, eventCount: batch.count)
                {
                    // Nothing to do off the database queue: sent from here,
                    // and the answer comes back with one hop.
                    cancel = callback.send(request) { finish(UploadClient.answer($0)) }
                } else {
                    // A task, not structured work: gzip and the header provider
                    // run off the database queue, and a transport that ignores
                    // cancellation must not hold the uploader past its timeout.
                    let task = Task {
                        finish(
                            await client.exchange(
                                through: transport, url: url, body: batch.body, eventCount: batch.count,
                                compress: compress))
                    }
                    cancel = { task.cancel() }
                }
            }
            inFlightAbandon.withLock { abandon in
                abandon = {
                    cancel()
                    finish(.failed("abandoned: the app was about to be suspended"))
                }
            }
            log.database.asyncAfter(timeout) { _ in
                cancel()
                finish(.failed("no answer from the \(sender) within \(Int(timeout)) s"))
            }
        }
        inFlightAbandon.withLock { $0 = nil }
        return answer
    }

    // MARK: - Settling events

    /// A success: the backoff starts over.
    func recovered() {
        failures = 0
        retryAt = nil
        lastFailure = nil
    }

    /// Per-event results: the events up to the first retriable failure are
    /// settled in one transaction (rejected ones dead-lettered, the position
    /// moved past all of them); from that failure on, everything stays
    /// queued and is retried.
    func settle(_ batch: UploadBatch, results: [UploadVerdict.EventResult], status: Int) throws {
        var settled = 0
        var accepted = 0
        var rejected: [Int64: String] = [:]
        var retryReason: String?
        for index in 0..<batch.count {
            let result = index < results.count ? results[index] : .retry(reason: "no result for this event")
            switch result {
            case .accepted:
                accepted += 1
            case .rejected(let reason):
                rejected[batch.positions[index]] = reason
            case .retry(let reason):
                retryReason = "HTTP \(status), event \(index + 1) of \(batch.count): \(reason)"
            }
            if retryReason != nil { break }
            settled = index + 1
        }
        if settled > 0 {
            let (consumer, through, first) = (Self.consumerID, batch.positions[settled - 1], batch.first)
            try log.database.onQueue { connection in
                try connection.transaction {
                    if !rejected.isEmpty {
                        let events = try connection.readEvents(after: first - 1, limit: settled)
                        let byReason = Dictionary(grouping: events.filter { rejected[$0.seq] != nil }) {
                            rejected[$0.seq] ?? ""
                        }
                        for (reason, group) in byReason {
                            try connection.deadLetter(group, status: status, reason: reason, consumer: consumer)
                        }
                    }
                    try connection.advanceConsumerInTransaction(consumer, to: through)
                }
            }
            signals.withLock { $0.position = max($0.position, through) }
            counters.uploaded += accepted
            if !rejected.isEmpty {
                let reason = rejected.sorted { $0.key < $1.key }.first?.value ?? ""
                diagnostics.report(
                    .eventsDeadLettered, eventCount: rejected.count,
                    "the collector refused \(rejected.count) of \(batch.count) events: \(reason)")
            }
        }
        if let retryReason {
            try backOff(retryReason, retryAfter: nil, events: batch.count - settled)
        }
        if !rejected.isEmpty { counters.failedRequests += 1 }
        recovered()
    }

    func deadLetter(after start: Int64, count: Int, status: Int?, reason: String) throws {
        let consumer = Self.consumerID
        let last = try log.database.onQueue { connection -> Int64? in
            let events = try connection.readEvents(after: start, limit: count)
            try connection.deadLetter(events, status: status, reason: reason, consumer: consumer)
            return events.last?.seq
        }
        if let last { signals.withLock { $0.position = max($0.position, last) } }
        diagnostics.report(.eventsDeadLettered, eventCount: count, "the collector refused \(count) events: \(reason)")
    }

    /// An event over the format's per-event limit is never sent: no
    /// collector of that kind would take it.
    func deadLetterOversized(at position: Int64, bytes: Int) throws {
        let limit = client.format.maximumEventBytes.map { " of \($0) bytes" } ?? ""
        try deadLetter(
            after: position - 1, count: 1, status: nil,
            reason: "not sent: \(bytes) bytes, over the collector's per-event limit\(limit)")
    }

    /// Whether a 415 names gzip as a coding the collector accepts (then the
    /// 415 is about something else).
    static func acceptsGzip(_ response: UploadResponse) -> Bool {
        guard let header = response.value(forHeader: "Accept-Encoding") else { return false }
        return header.split(separator: ",").contains { coding in
            let parts = coding.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            guard parts.first == "gzip" || parts.first == "x-gzip" else { return false }
            // "gzip;q=0" refuses it.
            return !parts.dropFirst().contains { $0.replacingOccurrences(of: " ", with: "") == "q=0" }
        }
    }
}
