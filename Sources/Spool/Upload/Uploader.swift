import Foundation
import SpoolStorage

/// The uploader: a consumer of the event log (`consumers.id = 'uploader'`)
/// that builds batches, hands them to the dispatcher and acts on the outcome.
///
/// Flushes happen when the pending count reaches `batchSize`, when the timer
/// fires (a Swift concurrency sleep, no run loop), on `flush()` and on
/// entering background (P2, D9). One flush runs at a time; a flush requested
/// meanwhile runs right after, never lost, never concurrent. After a retryable
/// failure, automatic triggers wait for the backoff; an explicit `flush()`
/// tries at once.
actor Uploader {
    static let consumerID = "uploader"

    struct Settings: Sendable {
        var url: URL
        var batchSize: Int
        var timerInterval: TimeInterval
        var retry: RetryPolicy
        var maximumBodyBytes = UploadBody.maximumBytes
    }

    private let log: EventLog
    private let dispatcher: any EventDispatcher
    private let settings: Settings
    private let isAllowed: @Sendable () -> Bool

    private var position: Int64 = 0
    private var pending = 0
    private var running = false
    private var rerun = false
    private var rerunForced = false
    private var waiting: [CheckedContinuation<Void, any Error>] = []
    private var failures = 0
    private var retryAt: Date?
    private var retryTask: Task<Void, Never>?
    private var timerTask: Task<Void, Never>?
    private var random = FastRandom()
    private var closed = false
    private var counters = (uploaded: 0, requests: 0, failedRequests: 0)
    private var lastFailure: String?

    /// The uploader runs on the database queue: reading a batch and saving a
    /// position need no hop to another thread.
    nonisolated var unownedExecutor: UnownedSerialExecutor {
        log.database.executor.asUnownedSerialExecutor()
    }

    init(log: EventLog, dispatcher: any EventDispatcher, settings: Settings, isAllowed: @escaping @Sendable () -> Bool)
    {
        self.log = log
        self.dispatcher = dispatcher
        self.settings = settings
        self.isAllowed = isAllowed
    }

    /// Registers the consumer, counts what is pending from earlier runs and
    /// starts the timer.
    func start() async throws {
        let (position, pending) = try log.database.onQueue { connection in
            let position = try connection.registerConsumer(Self.consumerID, startingAt: .oldest)
            return (position, try connection.countEvents(after: position))
        }
        self.position = position
        self.pending = pending
        if settings.timerInterval > 0 {
            let interval = settings.timerInterval
            timerTask = Task { [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(nanoseconds: Self.nanoseconds(interval))
                    guard !Task.isCancelled else { return }
                    await self?.timerFired()
                }
            }
        }
        if pending > 0 && (pending >= settings.batchSize || settings.timerInterval == 0) { trigger(force: false) }
    }

    /// Stops the timer and retries. An upload in flight may still finish; if
    /// its result cannot be saved, its events are sent again next launch.
    func stop() {
        closed = true
        timerTask?.cancel()
        retryTask?.cancel()
        for continuation in waiting { continuation.resume(throwing: SpoolError.closed) }
        waiting.removeAll()
    }

    // MARK: - Triggers

    /// `count` events were committed.
    func committed(_ count: Int) {
        pending += count
        if settings.timerInterval == 0 || pending >= settings.batchSize { trigger(force: false) }
    }

    private func timerFired() {
        if pending > 0 { trigger(force: false) }
    }

    /// Entering background, the dispatcher's `flushEvents()`, or a host's
    /// notifier: upload now, unless backing off.
    func requestFlush() {
        trigger(force: false)
    }

    /// ``requestFlush()`` for synchronous callers (lifecycle notifications,
    /// the dispatcher's `flushEvents()`). The task is the one way from a
    /// non-async context onto the actor; it only enqueues the request.
    nonisolated func requestFlushFromAnyThread() {
        Task { await self.requestFlush() }
    }

    /// Uploads everything pending now, ignoring any backoff wait.
    ///
    /// - Throws: ``UploadError/retryable(_:)`` when the collector could not
    ///   take it all; the rest stays queued and is retried with backoff.
    func flush() async throws {
        guard !closed else { throw SpoolError.closed }
        try await withCheckedThrowingContinuation { continuation in
            waiting.append(continuation)
            trigger(force: true)
        }
    }

    private func trigger(force: Bool) {
        guard !closed else { return }
        if running {
            rerun = true
            rerunForced = rerunForced || force
            return
        }
        running = true
        Task { await self.run(force: force) }
    }

    /// Flush passes, one at a time, until no trigger arrived during the last.
    private func run(force: Bool) async {
        var force = force
        repeat {
            rerun = false
            let waiters = waiting
            waiting.removeAll()
            let result: Result<Void, any Error>
            do {
                try await drain(force: force || !waiters.isEmpty)
                result = .success(())
            } catch {
                result = .failure(error)
            }
            for waiter in waiters { waiter.resume(with: result) }
            force = rerunForced
            rerunForced = false
        } while (rerun || !waiting.isEmpty) && !closed
        running = false
    }

    // MARK: - A flush pass

    private func drain(force: Bool) async throws {
        // Each database call saves the previous batch's success and reads the
        // next batch, in one hop.
        var uploadedThrough: Int64?
        while !closed {
            guard isAllowed() else { break }  // nothing is uploaded while opted out
            if !force, let retryAt, retryAt > Date() { break }  // the retry task comes back
            let batch = try await advanceAndRead(through: uploadedThrough)
            uploadedThrough = nil
            guard let batch else {
                pending = 0
                return
            }
            if try await send(batch) { uploadedThrough = batch.last }
        }
        if let through = uploadedThrough {
            uploadedThrough = nil
            _ = try await advanceAndRead(through: through, read: false)
        }
    }

    /// Saves the uploader's position at `through` (deleting the prefix every
    /// consumer finished) and reads the next batch, in one database call.
    private func advanceAndRead(through: Int64?, read: Bool = true) async throws -> UploadBatch? {
        let (limit, maximumBytes, after) = (settings.batchSize, settings.maximumBodyBytes, max(position, through ?? 0))
        let consumer = Self.consumerID
        let batch = try log.database.onQueue { connection -> UploadBatch? in
            guard let through else {
                return read
                    ? try UploadBatch.read(after: after, limit: limit, maximumBytes: maximumBytes, from: connection)
                    : nil
            }
            return try connection.transaction {
                try connection.advanceConsumerInTransaction(consumer, to: through)
                return read
                    ? try UploadBatch.read(after: after, limit: limit, maximumBytes: maximumBytes, from: connection)
                    : nil
            }
        }
        if let through { position = max(position, through) }
        return batch
    }

    /// Sends one batch and acts on the outcome.
    ///
    /// - Returns: true when the collector took the whole batch (its position
    ///   is saved with the next read); false when it was split or
    ///   dead-lettered (already saved).
    /// - Throws: ``UploadError/retryable(_:)`` when it must stay queued.
    private func send(_ batch: UploadBatch) async throws -> Bool {
        let outcome = await dispatch(EventForDispatch(url: settings.url, body: batch.body, eventCount: batch.count))
        counters.requests += 1
        switch outcome {
        case .response(let status, _, _) where (200..<300).contains(status):
            counters.uploaded += batch.count
            pending = max(0, pending - batch.count)
            failures = 0
            retryAt = nil
            lastFailure = nil
            return true
        case .response(let status, let retryAfter, let message) where status >= 500 || status == 429 || status == 408:
            try backOff("HTTP \(status)\(message.map { ": \($0)" } ?? "")", retryAfter: retryAfter)
        case .transportFailure(let reason):
            try backOff(reason, retryAfter: nil)
        case .response(let status, _, let message) where status == 413 || status == 400:
            // Too large, or something in it is refused: split to isolate.
            counters.failedRequests += 1
            if batch.count == 1 {
                try await deadLetter(after: batch.first - 1, count: 1, status: status, message: message)
            } else {
                let half = batch.count / 2
                try await sendRange(after: batch.first - 1, count: half)
                try await sendRange(after: batch.positions[half - 1], count: batch.count - half)
            }
            return false
        case .response(let status, _, let message):
            // Other 4xx (and anything unexpected): the collector will never take these.
            counters.failedRequests += 1
            try await deadLetter(after: batch.first - 1, count: batch.count, status: status, message: message)
            return false
        }
    }

    /// Sends the `count` events after `position`, saving each success at once.
    private func sendRange(after position: Int64, count: Int) async throws {
        let (maximumBytes, consumer) = (settings.maximumBodyBytes, Self.consumerID)
        var after = position
        var remaining = count
        while remaining > 0 {
            let start = after
            let limit = remaining
            guard
                let batch = try log.database.onQueue({
                    try UploadBatch.read(after: start, limit: limit, maximumBytes: maximumBytes, from: $0)
                })
            else { return }
            if try await send(batch) {
                let last = batch.last
                _ = try log.database.onQueue { try $0.advanceConsumer(consumer, to: last) }
                self.position = max(self.position, last)
            }
            after = batch.last
            remaining -= batch.count
        }
    }

    private func dispatch(_ event: EventForDispatch) async -> DispatchOutcome {
        await withCheckedContinuation { continuation in
            let once = Protected(false)
            dispatcher.dispatchEvent(event: event) { outcome in
                // A dispatcher must call once; tolerate one that calls twice.
                let first = once.withLock { called in
                    defer { called = true }
                    return !called
                }
                if first { continuation.resume(returning: outcome) }
            }
        }
    }

    private func deadLetter(after start: Int64, count: Int, status: Int, message: String?) async throws {
        let reason =
            "HTTP \(status)" + (message.map { ": " + $0.trimmingCharacters(in: .whitespacesAndNewlines) } ?? "")
        let consumer = Self.consumerID
        let last = try log.database.onQueue { connection -> Int64? in
            let events = try connection.readEvents(after: start, limit: count)
            try connection.deadLetter(events, status: status, reason: reason, consumer: consumer)
            return events.last?.seq
        }
        position = max(position, last ?? position)
        pending = max(0, pending - count)
    }

    private func backOff(_ reason: String, retryAfter: TimeInterval?) throws -> Never {
        counters.failedRequests += 1
        failures += 1
        lastFailure = reason
        let delay = settings.retry.delay(attempt: failures, retryAfter: retryAfter, random: &random)
        retryAt = Date().addingTimeInterval(delay)
        retryTask?.cancel()
        retryTask = Task { [weak self] in
            try? await Task.sleep(nanoseconds: Self.nanoseconds(delay))
            guard !Task.isCancelled else { return }
            await self?.retryDue()
        }
        throw UploadError.retryable(reason)
    }

    private func retryDue() {
        retryAt = nil
        if pending > 0 { trigger(force: false) }
    }

    /// `seconds` as whole nanoseconds for `Task.sleep`, saturating instead of
    /// trapping on a huge or non-finite interval.
    static func nanoseconds(_ seconds: TimeInterval) -> UInt64 {
        let nanoseconds = seconds * 1e9
        guard nanoseconds.isFinite, nanoseconds > 0 else { return nanoseconds > 0 ? .max : 0 }
        return nanoseconds >= 1.8e19 ? .max : UInt64(nanoseconds)
    }

    // MARK: - Statistics

    func statistics() async throws -> UploadStatistics {
        let (dropped, deadLettered, pending) = try log.database.onQueue { connection in
            (
                try connection.droppedCount(of: Self.consumerID),
                try connection.deadLetterCount(),
                try connection.countEvents(after: connection.position(of: Self.consumerID) ?? 0)
            )
        }
        return UploadStatistics(
            pending: pending, dropped: dropped, deadLettered: deadLettered, uploaded: counters.uploaded,
            requests: counters.requests, failedRequests: counters.failedRequests, lastFailure: lastFailure,
            nextRetryIn: retryAt.map { max(0, $0.timeIntervalSinceNow) })
    }
}
