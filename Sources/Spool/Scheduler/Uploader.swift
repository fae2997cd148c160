import Foundation

/// Counters a user can read to see what the uploader did.
public struct UploadStatistics: Sendable, Hashable {
    /// Events waiting for upload.
    public var pending: Int
    /// Events the queue bound dropped before they could be uploaded.
    public var dropped: Int
    /// Events the collector refused for good (see the `dead_letters` table).
    public var deadLettered: Int
    /// Events the collector accepted (this process).
    public var uploaded: Int
    /// Requests sent (this process), and how many of them failed.
    public var requests: Int
    public var failedRequests: Int
    /// The last failure, if the last attempt failed.
    public var lastFailure: String?
    /// Seconds until the next automatic retry, when backing off.
    public var nextRetryIn: TimeInterval?
}

/// Why a flush did not upload everything.
public enum UploadError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The collector could not be reached or answered with a retryable status;
    /// the events stay queued and are retried with backoff.
    case retryable(String)

    public var description: String {
        switch self {
        case .retryable(let reason): return "Upload failed, events kept for a retry: \(reason)"
        }
    }
}

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
        position = try await log.registerConsumer(Self.consumerID, startingAt: .oldest)
        pending = try await log.countEvents(after: position)
        if settings.timerInterval > 0 {
            let interval = settings.timerInterval
            timerTask = Task { [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(interval))
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
        while !closed {
            guard isAllowed() else { return }  // nothing is uploaded while opted out
            if !force, let retryAt, retryAt > Date() { return }  // the retry task will come back
            let events = try await log.readEvents(
                after: position, limit: settings.batchSize, maxBytes: settings.maximumBodyBytes)
            guard !events.isEmpty else {
                pending = 0
                return
            }
            try await send(events[...])
        }
    }

    /// Sends `events` in order until each is uploaded or dead-lettered.
    ///
    /// - Throws: ``UploadError/retryable(_:)`` when they must stay queued.
    private func send(_ events: ArraySlice<StoredEvent>) async throws {
        guard !events.isEmpty else { return }
        let (body, count) = UploadBody.build(events, maximumBytes: settings.maximumBodyBytes)
        let sent = events.prefix(count)
        let outcome = await dispatch(EventForDispatch(url: settings.url, body: body, eventCount: count))
        counters.requests += 1
        switch outcome {
        case .response(let status, _, _) where (200..<300).contains(status):
            try await advance(past: sent)
            counters.uploaded += count
            failures = 0
            retryAt = nil
            lastFailure = nil
        case .response(let status, let retryAfter, let message) where status >= 500 || status == 429 || status == 408:
            try backOff("HTTP \(status)\(message.map { ": \($0)" } ?? "")", retryAfter: retryAfter)
        case .transportFailure(let reason):
            try backOff(reason, retryAfter: nil)
        case .response(let status, _, let message) where status == 413 || status == 400:
            // Too large, or something in it is refused: split to isolate.
            counters.failedRequests += 1
            if sent.count == 1 {
                try await deadLetter(sent, status: status, message: message)
            } else {
                let half = sent.count / 2
                try await send(sent.prefix(half))
                try await send(sent.dropFirst(half))
            }
        case .response(let status, _, let message):
            // Other 4xx (and anything unexpected): the collector will never take these.
            counters.failedRequests += 1
            try await deadLetter(sent, status: status, message: message)
        }
        if count < events.count { try await send(events.dropFirst(count)) }
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

    private func advance(past events: ArraySlice<StoredEvent>) async throws {
        guard let last = events.last?.seq else { return }
        try await log.advanceConsumer(Self.consumerID, to: last)
        position = max(position, last)
        pending = max(0, pending - events.count)
    }

    private func deadLetter(_ events: ArraySlice<StoredEvent>, status: Int, message: String?) async throws {
        let reason =
            "HTTP \(status)" + (message.map { ": " + $0.trimmingCharacters(in: .whitespacesAndNewlines) } ?? "")
        let batch = Array(events)
        try await log.database.run { connection in
            try connection.deadLetter(batch, status: status, reason: reason, consumer: Self.consumerID)
        }
        position = max(position, batch.last?.seq ?? position)
        pending = max(0, pending - batch.count)
    }

    private func backOff(_ reason: String, retryAfter: TimeInterval?) throws -> Never {
        counters.failedRequests += 1
        failures += 1
        lastFailure = reason
        let delay = settings.retry.delay(attempt: failures, retryAfter: retryAfter, random: &random)
        retryAt = Date().addingTimeInterval(delay)
        retryTask?.cancel()
        retryTask = Task { [weak self] in
            try? await Task.sleep(for: .seconds(delay))
            guard !Task.isCancelled else { return }
            await self?.retryDue()
        }
        throw UploadError.retryable(reason)
    }

    private func retryDue() {
        retryAt = nil
        if pending > 0 { trigger(force: false) }
    }

    // MARK: - Statistics

    func statistics() async throws -> UploadStatistics {
        let (dropped, deadLettered, pending) = try await log.database.run { connection in
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
