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
        /// Requests in flight at once (``EngineConfiguration/maximumConcurrentRequests``).
        var concurrentRequests = 1
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

    /// Pending counts the commit handler reads without hopping onto the actor.
    struct Signals {
        var position: Int64 = 0
        var head: Int64 = 0
        var flushRequested = false
        /// Uploads were found paused (``pauseUploads``): commits start no
        /// pass but ask the database whether they still are; the timer's
        /// passes look again.
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
    /// The requests in flight, and whether background time ran out
    /// (``BackgroundHold``).
    nonisolated let inFlight = Protected(InFlightRequests())
    /// How the read ahead of the next batch went (``PipelineCounts``).
    nonisolated let pipeline = Protected(PipelineCounts())

    /// When passes run, who waits for them, pause and stop, the backoff,
    /// and what holds uploads back: the rules, as a value
    /// (``UploadSchedule``); this actor performs what it returns.
    var schedule: UploadSchedule<CheckedContinuation<Void, any Error>, @Sendable () -> Void>
    /// Set by ``stop(patience:)``: the periodic timer stops re-arming.
    nonisolated let timerStopped = Protected(false)
    var counters = (uploaded: 0, requests: 0, failedRequests: 0)
    /// The database file the last batch was read from
    /// (``DatabaseQueue/fileGeneration``).
    var readGeneration = 0
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
    /// The keys of the batches sent most recently (at most
    /// ``remembersSends``, the newest last), and how many times each went:
    /// the `X-Retry-Count` of its next send, also after requests of other
    /// batches in between (a bisection's halves).
    var sends: [(key: String, count: Int)] = []
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
    let networkPath: (any NetworkPathSource)?

    /// The uploader runs on the database queue: reading a batch and saving a
    /// position need no hop to another thread.
    nonisolated var unownedExecutor: UnownedSerialExecutor {
        log.database.executor.asUnownedSerialExecutor()
    }

    init(
        log: EventLog, dispatcher: any EventDispatcher, settings: Settings, owner: String,
        diagnostics: DiagnosticsCenter, results: UploadResultCenter? = nil,
        deadLetterLimits: DeadLetterLimits = DeadLetterLimits(), networkPath: (any NetworkPathSource)? = nil,
        transferFiles: TransferFiles? = nil, policy: UploadPolicy = .always,
        isAllowed: @escaping @Sendable () -> Bool
    ) {
        schedule = UploadSchedule(retry: settings.retry, leaseDuration: settings.leaseDuration, policy: policy)
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

    /// A hold for one background activity: from the moment its time runs
    /// out until it ends, the requests in flight are abandoned and no other
    /// is sent (``BackgroundHold``).
    nonisolated func backgroundHold() -> BackgroundHold {
        BackgroundHold(inFlight)
    }

    /// Whether a background activity's time ran out and it has not ended:
    /// no request goes out.
    nonisolated var isOutOfTime: Bool { inFlight.withLock { $0.expiredHolds > 0 } }
}

/// The requests an uploader has in flight, each with a way to give up on
/// it, and how many background activities ran out of time and have not
/// ended yet.
struct InFlightRequests {
    var abandon: [ObjectIdentifier: @Sendable () -> Void] = [:]
    var expiredHolds = 0
}

/// What a background activity that may upload holds: when its time runs
/// out (``expire()``), the requests in flight are abandoned (their answers
/// are ignored; their events stay queued and are sent again later, at
/// least once), and until the activity ends (``release()``) no request
/// goes out, so a pass that starts after the expiry cannot send under the
/// activity's name. Expiring after the release does nothing.
final class BackgroundHold: Sendable {
    private let inFlight: Protected<InFlightRequests>
    private let state = Protected((expired: false, released: false))

    init(_ inFlight: Protected<InFlightRequests>) {
        self.inFlight = inFlight
    }

    func expire() {
        let abandon = state.withLock { state -> [@Sendable () -> Void] in
            guard !state.expired, !state.released else { return [] }
            state.expired = true
            return inFlight.withLock { requests in
                requests.expiredHolds += 1
                return Array(requests.abandon.values)
            }
        }
        for abandon in abandon { abandon() }
    }

    func release() {
        state.withLock { state in
            guard !state.released else { return }
            state.released = true
            if state.expired { inFlight.withLock { $0.expiredHolds -= 1 } }
        }
    }
}
