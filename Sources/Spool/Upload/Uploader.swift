import Foundation
import SpoolStorage

/// The uploader: a consumer of the event log (`consumers.id = 'uploader'`)
/// that builds batches in the dispatcher's format, sends them through its
/// transport and acts on the format's verdict on each answer.
///
/// Flushes happen when the pending count reaches `batchSize`, when the timer
/// fires, on `flush()` and on entering background. One flush runs at a time;
/// a flush requested meanwhile runs right after, never lost, never
/// concurrent. After a retryable failure, automatic triggers wait for the
/// backoff; an explicit `flush()` tries at once.
///
/// Several processes may share the database (an app and its extensions):
/// each batch is read, and each success saved, inside a transaction that
/// also takes or renews the uploader's lease, and the position always comes
/// from the database. Only the lease holder uploads, so an event the collector
/// accepted is never sent again by another process; a lease outlives the
/// longest request, and a killed holder's lease expires.
actor Uploader {
    static let consumerID = Connection.uploaderConsumer

    struct Settings: Sendable {
        var url: URL
        var batchSize: Int
        var timerInterval: TimeInterval
        var retry: RetryPolicy
        /// A dispatcher that has not answered after this long has failed (its
        /// late answer is ignored).
        var dispatchTimeout: TimeInterval = 60

        /// How long a lease lasts: longer than any request, so a live holder
        /// never loses it mid-request.
        var leaseDuration: TimeInterval { dispatchTimeout + 30 }

        /// Whether `pending` events call for a flush without waiting for the
        /// timer: a full batch, or any at all with a zero interval.
        func flushIsDue(pending: Int64) -> Bool {
            pending > 0 && (pending >= Int64(batchSize) || timerInterval == 0)
        }
    }

    // Internal rather than private where Uploader+Sending.swift, which sends
    // batches and acts on the collector's answers, needs it.

    /// Pending counts the commit handler reads without hopping onto the actor.
    struct Signals {
        var position: Int64 = 0
        var head: Int64 = 0
        var flushRequested = false
        /// Uploads were found paused (``pauseUploads``): commits start no
        /// pass; the timer's passes look again.
        var paused = false
        /// The last read found loss waiting to be reported (`upload_loss`),
        /// or none was read yet: settling a request settles its loss too.
        /// (Only a read under the lease records what a request carries, so
        /// with none found, no request carries any.)
        var lossCounted = true
        var pending: Int64 { max(0, head - position) }
    }

    let log: EventLog
    let client: UploadClient
    let settings: Settings
    let isAllowed: @Sendable () -> Bool
    let diagnostics: DiagnosticsCenter
    /// The engine's name in the lease column.
    let owner: String
    nonisolated let signals = Protected(Signals())
    /// Gives up on the request in flight, if any (the app is about to be
    /// suspended): it is answered as failed and its events stay queued.
    nonisolated let inFlightAbandon = Protected<(@Sendable () -> Void)?>(nil)
    /// How the read ahead of the next batch went (``PipelineCounts``).
    nonisolated let pipeline = Protected(PipelineCounts())

    private var running = false
    private var rerun = false
    private var rerunForced = false
    var waiting: [CheckedContinuation<Void, any Error>] = []
    /// `stop()` and `pause()` callers waiting for the pass in flight to end
    /// (each resumes its caller at most once).
    private var stopped: [@Sendable () -> Void] = []
    var failures = 0
    /// When the backoff ends, in seconds of the database's clock.
    var retryAt: Double?
    /// Which scheduled retry is the live one: a timer that fires for an
    /// older one (replaced, or cancelled by ``stop(patience:)`` or a network
    /// path's return) does nothing.
    var retryGeneration = 0
    /// Set by ``stop(patience:)``: the periodic timer stops re-arming.
    private nonisolated let timerStopped = Protected(false)
    var random = FastRandom()
    var closed = false
    /// Holds from ``pause()``: while above zero no pass starts, and the
    /// pass running ends after its request in flight.
    var pauses = 0
    /// A trigger arrived while paused: run once resumed.
    private var triggeredWhilePaused = false
    var counters = (uploaded: 0, requests: 0, failedRequests: 0)
    /// The database file the last batch was read from
    /// (``DatabaseQueue/fileGeneration``).
    var readGeneration = 0
    var lastFailure: String?
    /// Why uploading is held back (the collector refused requests
    /// themselves); nil once one is accepted.
    var heldBack: String?
    /// Gzip bodies; off for good once the collector is found not to read them.
    var compresses: Bool
    /// `.automatic` compression through Spool's transport: a gzip body
    /// answered 400 or 415 is sent once more uncompressed.
    let negotiatesCompression: Bool
    /// The collector accepted a gzip body in this launch: a 400 to a later
    /// one is about its events, not the coding.
    var gzipTaken = false
    /// The largest body (before compression) the collector accepted in this
    /// launch: a 413 to a larger one-event body singles that event out.
    var largestAcceptedBody = 0
    let deadLetterLimits: DeadLetterLimits
    /// Where each request's result goes (nil: nobody listens).
    let results: UploadResultCenter?
    /// The batch key sent last, and how many times in a row (the
    /// `X-Retry-Count` of its next send).
    var lastSent: (key: String, sends: Int)?
    /// Results not yet in `upload_batches`: written with the uploader's
    /// transaction once ``recordsPerWrite`` wait, and when a pass ends.
    var unsavedRecords: [UploadBatchRecord] = []
    /// Where hand-off bodies are written (nil: an in-memory database).
    let transferFiles: TransferFiles?
    /// Set when batches may go to the system's background transfer service.
    var handoffs: HandoffSettings?
    /// The system's answers to hand-offs, settled by the next pass.
    var reports: [(batchID: String, answer: UploadClient.Answer)] = []
    /// What says whether the system has a network path (nil: nothing does).
    private let networkPath: (any NetworkPathSource)?
    /// What the system says of the network path (usable and unmetered when
    /// nothing says).
    var path = NetworkPathState(usable: true, metered: false)
    /// Which networks uploads may use.
    var policy: UploadPolicy

    /// The uploader runs on the database queue: reading a batch and saving a
    /// position need no hop to another thread.
    nonisolated var unownedExecutor: UnownedSerialExecutor {
        log.database.executor.asUnownedSerialExecutor()
    }

    init(
        log: EventLog, dispatcher: any EventDispatcher, settings: Settings, owner: String,
        diagnostics: DiagnosticsCenter, results: UploadResultCenter? = nil,
        deadLetterLimits: DeadLetterLimits = .default, networkPath: (any NetworkPathSource)? = nil,
        transferFiles: TransferFiles? = nil, policy: UploadPolicy = .always,
        isAllowed: @escaping @Sendable () -> Bool
    ) {
        self.policy = policy
        self.transferFiles = transferFiles
        self.networkPath = networkPath
        self.owner = owner
        self.log = log
        // A DefaultEventDispatcher brings its format, options and transport;
        // any other dispatcher gets Spool's body as given.
        client = (dispatcher as? DefaultEventDispatcher)?.client ?? UploadClient(dispatcher: dispatcher)
        compresses = client.compresses
        if case .transport = client.sender, client.options.compression == .automatic, client.compresses {
            negotiatesCompression = true
        } else {
            negotiatesCompression = false
        }
        self.results = results
        self.deadLetterLimits = deadLetterLimits
        self.settings = settings
        self.diagnostics = diagnostics
        self.isAllowed = isAllowed
    }

    /// Registers the consumer, derives what is pending from positions (no
    /// count over the log, however long) and starts the timer.
    func start() async throws {
        let (url, limits, negotiates) = (settings.url.absoluteString, deadLetterLimits, negotiatesCompression)
        let (position, head, refusesGzip) = try log.database.onQueue { connection in
            try connection.transaction {
                try self.enforce(limits, connection)
                return (
                    try connection.registerConsumer(Self.consumerID, startingAt: .oldest),
                    try connection.headPosition(),
                    negotiates ? try connection.collectorRefusesGzip(url) : false
                )
            }
        }
        if refusesGzip { compresses = false }
        try deleteOrphanedBodies()
        let pending = signals.withLock { signals in
            signals.position = position
            signals.head = head
            return signals.pending
        }
        if settings.timerInterval > 0 { armTimer(settings.timerInterval) }
        networkPath?.start { [weak self] path in self?.enter { $0.networkChanged(path) } }
        if settings.flushIsDue(pending: pending) { trigger(force: false) }
    }

    /// Stops the timer and retries and lets a request in flight finish (at
    /// most `patience` seconds) so its answer is saved. The engine gives up
    /// the lease afterwards, with its other leases.
    /// A request still unanswered after that is abandoned: its answer is
    /// ignored and its events are sent again by whoever uploads next (at
    /// least once).
    func stop(patience: TimeInterval = 5) async {
        closed = true
        networkPath?.cancel()
        timerStopped.withLock { $0 = true }
        retryGeneration += 1
        for continuation in waiting { continuation.resume(throwing: SpoolError.closed) }
        waiting.removeAll()
        if running {
            await withCheckedContinuation { continuation in
                // Resumed by the pass's end or by the patience timer,
                // whichever comes first.
                let once = Protected(false)
                let resume: @Sendable () -> Void = {
                    let first = once.withLock { done in
                        defer { done = true }
                        return !done
                    }
                    if first { continuation.resume() }
                }
                stopped.append(resume)
                // A dispatch timer: it touches no database state, so it
                // fires while suspended without asking for a background window.
                log.database.timer(after: patience) { _ in resume() }
            }
        }
    }

    // MARK: - Triggers

    /// The writer committed up to `head` (called on the database queue, for
    /// every commit): starts a flush once `batchSize` events are pending.
    nonisolated func committed(head: Int64) {
        let due = signals.withLock { signals -> Bool in
            signals.head = max(signals.head, head)
            guard !signals.flushRequested, !signals.paused else { return false }
            guard settings.flushIsDue(pending: signals.pending) else { return false }
            signals.flushRequested = true
            return true
        }
        // Only when a flush is due, not per commit.
        if due { enter { $0.trigger(force: false) } }
    }

    /// The periodic flush: every `interval` seconds of the database's clock
    /// while events are pending. A dispatch timer on the database queue, so
    /// it keeps time however busy the concurrency pool is; it reads only
    /// `signals`, so it fires while suspended without asking for a
    /// background window (and starts nothing then), and it hops onto the
    /// actor only when events are pending.
    private nonisolated func armTimer(_ interval: TimeInterval) {
        log.database.timer(after: interval) { [weak self] firing in
            guard let self, !self.timerStopped.withLock({ $0 }) else { return }
            if case .closed = firing { return }
            if case .awake = firing, self.signals.withLock({ $0.pending }) > 0 { self.enter { $0.timerFired() } }
            self.armTimer(interval)
        }
    }

    private func timerFired() {
        if signals.withLock({ $0.pending }) > 0 { trigger(force: false) }
    }

    /// Entering background, the dispatcher's `flushEvents()`, or a host's
    /// notifier: upload now, unless backing off.
    func requestFlush() {
        trigger(force: false)
    }

    /// ``requestFlush()`` for synchronous callers (lifecycle notifications,
    /// the dispatcher's `flushEvents()`).
    nonisolated func requestFlushFromAnyThread() {
        enter { $0.requestFlush() }
    }

    /// Runs `body` on the actor, for synchronous code: the commit handler, a
    /// timer's block on the database queue, a notification, the network
    /// path's monitor. `body` only flips state or starts a pass.
    nonisolated func enter(_ body: @escaping @Sendable (isolated Uploader) -> Void) {
        // Unstructured: the one way from synchronous code onto the actor; nothing waits for it.
        Task { await body(self) }
    }

    /// Uploads everything pending now, ignoring any backoff wait.
    ///
    /// - Throws: ``SpoolError/uploadDeferred(reason:)`` when the collector could not
    ///   take it all (the rest stays queued and is retried with backoff), or
    ///   when another process holds the upload lease (it uploads them).
    func flush() async throws {
        guard !closed else { throw SpoolError.closed }
        try await withCheckedThrowingContinuation { continuation in
            waiting.append(continuation)
            trigger(force: true)
        }
    }

    func trigger(force: Bool) {
        signals.withLock { $0.flushRequested = false }
        guard !closed else { return }
        guard pauses == 0 else {
            triggeredWhilePaused = true
            rerunForced = rerunForced || force
            return
        }
        if running {
            rerun = true
            rerunForced = rerunForced || force
            return
        }
        running = true
        // A task so the caller (a commit, a timer) never waits for the network.
        Task { await self.run(force: force) }
    }

    /// Flush passes, one at a time, until no trigger arrived during the last.
    /// A ``pause()`` ends the pass after the request in flight; its callers
    /// and triggers wait for the pass after ``resume()``.
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
            if pauses > 0, !closed, case .success = result {
                waiting = waiters + waiting
            } else {
                for waiter in waiters { waiter.resume(with: result) }
            }
            force = rerunForced
            rerunForced = false
        } while (rerun || !waiting.isEmpty) && !closed && pauses == 0
        if pauses > 0, rerun || !waiting.isEmpty {
            triggeredWhilePaused = true
            rerunForced = rerunForced || force
        }
        running = false
        resumeStopped()
    }

    private func resumeStopped() {
        let stopped = self.stopped
        self.stopped.removeAll()
        for resume in stopped { resume() }
    }

    /// Waits for the pass in flight (its request answered, its position
    /// saved) and starts no other until ``resume()``: for erasure and consent
    /// withdrawal, which must not race an upload.
    func pause() async {
        pauses += 1
        guard running else { return }
        await withCheckedContinuation { continuation in stopped.append { continuation.resume() } }
    }

    /// Ends one ``pause()`` and starts what was requested meanwhile.
    func resume() {
        pauses = max(0, pauses - 1)
        guard pauses == 0 else { return }
        // Positions are read again by the next pass (erasure moved them): no
        // database access here, which may be suspended by now.
        if triggeredWhilePaused || !waiting.isEmpty {
            triggeredWhilePaused = false
            trigger(force: rerunForced)
        }
    }

    /// Moves the uploader past `position` (never back), so none of the
    /// events up to it is ever uploaded: the user withdrew consent. Call
    /// while paused.
    func discard(through position: Int64) throws {
        let consumer = Self.consumerID
        // Dead letters recorded before are discarded too: put back later,
        // they would be uploaded.
        let handedOff = try log.database.onQueue { connection in
            try connection.transaction {
                try connection.deleteDeadLetters(through: position)
                // The loss counted so far is about the events discarded: the
                // collector hears of nothing recorded before the withdrawal.
                try connection.forgetLoss()
                _ = try connection.advanceConsumerInTransaction(consumer, to: position)
                return try connection.deleteHandoffs(through: position)
            }
        }
        signals.withLock { $0.position = max($0.position, position) }
        if !handedOff.isEmpty { handoffs?.session.cancelAll() }
        for batchID in handedOff { transferFiles?.delete(only: batchID) }
    }

    /// The app is about to be suspended: stop waiting for the request in
    /// flight (its answer is ignored; its events stay queued and are sent
    /// again later, at least once).
    nonisolated func abandonInFlightFromAnyThread() {
        inFlightAbandon.withLock { $0 }?()
    }
}
