import Foundation
import SpoolStorage

/// Spool's facade: records events, runs sessions and consent, and hands
/// events to listeners.
///
/// ```swift
/// let engine = EventEngine(configuration: EngineConfiguration(database: .file(url)))
/// engine.events.addObserver(forwarder)         // allowed before start
/// try await engine.start()                     // opens, migrates, starts a session, fires ready
/// try engine.record("purchase", parameters: ["amount": 9.99, "at": .date(Date())])
/// await engine.close()
/// ```
///
/// `record` may be called from any thread. It validates and encodes the
/// parameters on the caller's thread, applies the gates (consent, enabled,
/// session limit), and appends to the bounded group-commit buffer (when it
/// is full, it waits for the writer first: see ``WriteBufferLimit``);
/// everything else happens on Spool's own queues.
///
/// Every callback Spool makes — listeners, `on(_:_:)` registrations, streams,
/// survey triggers, diagnostics — runs on one internal serial delivery queue,
/// never the main thread, in the order events were recorded. (The one
/// exception: subscribing to ``EventTopic/ready`` after it fired calls the
/// callback at once, on the subscribing thread.)
///
/// Call ``close()`` when you are done with an engine. One dropped without
/// `close()` still commits what it accepted, then frees its database
/// connections.
public final class EventEngine: Sendable {
    /// The heartbeat: stored and uploaded, never delivered to listeners.
    public static let heartbeatEventName = ReservedEventName.heartbeat
    /// Recorded when a session starts; delivered like any event.
    public static let sessionStartEventName = ReservedEventName.sessionStart

    /// The configuration this engine was created with.
    public let configuration: EngineConfiguration
    /// The listener registry: plain and durable listeners, and event streams.
    public let events: EventObservers
    /// Surveys, their trigger rules, and the lifecycle events they record.
    public let surveys: SurveyCenter

    let state: Protected<State>
    package let delivery: DeliveryQueue
    let diagnosticsCenter: DiagnosticsCenter
    let uploaderBox = Protected<Uploader?>(nil)
    /// This engine's name in the lease columns (the uploader's, durable listeners').
    let leaseOwner = LeaseOwner.make()

    struct State {
        enum Phase { case idle, starting, started, closed }

        var phase = Phase.idle
        /// While ``start()`` opens the database (phase `.starting`):
        /// fulfilled once it has returned, so a `close()` meanwhile waits for
        /// it to close what it opened.
        var opening: Promise<Void>?
        /// Consent, the switch, the session and the events waiting for one.
        var gates: SessionGates
        /// Names never delivered: the configured exclusions and the heartbeat.
        var undelivered: Set<String>
        var log: EventLog?
        /// Whether the uploader may run: consent withdrawn means the events
        /// before it are being discarded, and nothing uploads until that is
        /// saved.
        var uploads = Uploads.allowed
        /// How many discards were started: only the latest lets uploads go on.
        var discards = 0
        /// The app is in the background (its database suspended).
        var inBackground = false
        /// Lifecycle notification observers, removed at close.
        var lifecycleTokens: [any NSObjectProtocol] = []

        var consent: Bool { gates.consent }
        var enabled: Bool { gates.enabled }
    }

    enum Uploads {
        case allowed
        /// Consent was withdrawn before ``start()``: start discards the
        /// upload queue as it found it, and holds uploads until then.
        case withdrawnBeforeStart
        /// Discarding what was recorded before a withdrawal.
        case discarding(Task<Void, Never>)

        var isAllowed: Bool {
            if case .allowed = self { return true }
            return false
        }

        /// The discard running, if any.
        var discard: Task<Void, Never>? {
            if case .discarding(let task) = self { return task }
            return nil
        }
    }

    /// An event accepted while no session runs.
    struct Waiting {
        var record: EventRecord
        /// Told what became of it (a `recordDurably` caller waits on this).
        var settle: (@Sendable (WaitingOutcome) -> Void)?
    }

    /// What became of an event that waited for a session.
    enum WaitingOutcome: Sendable {
        /// Appended to `log` (not necessarily committed yet).
        case appended(AppendReceipt, EventLog)
        /// A gate dropped it while it waited; it is never stored.
        case dropped(RecordOutcome)
        /// It could not be appended; it is never stored.
        case failed(any Error)
    }

    /// Creates an engine. No I/O happens until ``start()``.
    ///
    /// Listeners, registrations and surveys may be added right away, and
    /// events recorded before `start()` wait in memory for the first session.
    public init(configuration: EngineConfiguration = EngineConfiguration()) {
        self.configuration = configuration
        let state = Protected(
            State(
                gates: SessionGates(
                    consent: configuration.consent, enabled: configuration.enabled,
                    sessionEventLimit: configuration.sessionEventLimit,
                    waitingLimit: configuration.effectiveRetention ?? DefaultEventDispatcher.defaultMaxQueueSize),
                undelivered: configuration.excludedEventNames.union([ReservedEventName.heartbeat])))
        self.state = state
        let deliveryQueue = DispatchQueue(label: "spool.delivery", qos: .utility)
        let diagnostics = DiagnosticsCenter(handler: configuration.diagnosticHandler, queue: deliveryQueue)
        diagnosticsCenter = diagnostics
        let policy: @Sendable () -> DeliveryQueue.DeliveryPolicy = {
            state.withLock { DeliveryQueue.DeliveryPolicy(consent: $0.consent, undelivered: $0.undelivered) }
        }
        let durables = DurableListeners(queue: deliveryQueue, diagnostics: diagnostics, policy: policy)
        let events = EventObservers(durables: durables)
        self.events = events
        // The survey center records through this engine without holding it.
        let engine = Protected<WeakBox<EventEngine>?>(nil)
        surveys = SurveyCenter(
            context: SurveyCenter.Context(
                record: { name, parameters in
                    guard let engine = engine.withLock({ $0?.object }) else { throw SpoolError.closed }
                    return try engine.record(name, parameters: parameters)
                },
                database: { state.withLock { $0.log?.database } },
                diagnostics: diagnostics))
        delivery = DeliveryQueue(
            queue: deliveryQueue, observers: events, durables: durables, policy: policy)
        engine.withLock { $0 = WeakBox(self) }
    }

    deinit {
        // Dropped without close(): let go of what the log's handlers hold, so
        // the log, its database queue and its connections are freed once the
        // writer has committed what is buffered.
        let (log, tokens) = state.withLock { ($0.log, $0.lifecycleTokens) }
        if let log {
            log.setCommitHandler(nil)
            log.setGroupReader(nil)
            log.setFailureHandler(nil)
        }
        LifecycleObservation.remove(tokens)
    }

    // MARK: - Lifecycle

    /// Opens and migrates the database, starts a session (recording
    /// `session_start`), delivers the events recorded before it, and fires
    /// `.ready`.
    ///
    /// It checks the linked SQLite before touching any file, gives the
    /// database files their data-protection class and backup exclusion
    /// (Apple platforms: ``EngineConfiguration/fileProtection``,
    /// ``EngineConfiguration/excludesFromBackup``), and starts following the
    /// app's lifecycle (see ``applicationDidEnterBackground()``).
    ///
    /// The file work runs off the caller's executor, so calling this from the
    /// main actor does not block it. When it returns, `session_start` and the
    /// events recorded before it are committed and delivered, and every
    /// ``EventTopic/ready`` callback has run. Durable listeners added before
    /// this call have caught up with what they missed (unless another process
    /// holds them).
    ///
    /// - Throws: ``SpoolError`` or ``SQLiteError`` when the database cannot be
    ///   opened (``SpoolError/cannotOpen(path:reason:)``,
    ///   ``SpoolError/notADatabase(path:)``,
    ///   ``SpoolError/schemaTooNew(path:version:latestKnown:)``…); the engine
    ///   can then be started again, and the events recorded meanwhile are
    ///   kept. ``SpoolError/unsupportedSQLite(version:reason:)`` when the
    ///   SQLite library the app links is too old or lacks the JSON functions
    ///   (no file was touched). ``SpoolError/invalidConfiguration(_:)`` when called twice;
    ///   ``SpoolError/closed`` after ``close()``.
    public func start() async throws {
        let finished = Promise<Void>()
        try state.withLock { state in
            switch state.phase {
            case .idle:
                state.phase = .starting
                state.opening = finished
            case .closed: throw SpoolError.closed
            case .starting, .started: throw SpoolError.invalidConfiguration("start() was already called")
            }
        }
        defer {
            state.withLock { state in
                state.opening = nil
                if state.phase == .starting { state.phase = .idle }  // failed: it may be started again
            }
            finished.fulfill(())
        }
        let configuration = self.configuration
        let database = try await Self.openDatabase(configuration)
        if case .file = configuration.database,
            let failure = DatabaseFilePolicy.apply(
                to: database.path, protection: configuration.fileProtection,
                excludeFromBackup: configuration.excludesFromBackup)
        {
            diagnosticsCenter.report(
                .filePolicyNotApplied, error: failure,
                "the database files' protection class or backup exclusion could not be set")
        }
        let log = EventLog(database: database, limits: configuration.writeBuffer.limits)
        log.setMaximumRetainedEvents(configuration.effectiveRetention)
        let limits = EventLog.HistoryLimits(
            maximumAge: configuration.historyRetention, maximumRows: configuration.maximumHistoryRows)
        log.setHistoryLimits(limits)
        // The last event an earlier process left, read before this engine
        // appends any: what a withdrawal before start() discards.
        let headAtOpen: Int64
        do {
            let cutoff = limits.maximumAge.map { Date().timeIntervalSince1970 - $0 }
            headAtOpen = try await database.run { connection in
                _ = try connection.pruneHistory(before: cutoff, keepingAtMost: limits.maximumRows)
                return try connection.headPosition()
            }
            let uploader = try await startUploader(log)
            // Weak: the log must not keep the delivery queue or the uploader
            // (which hold the log) alive.
            // Survey conditions are counted inside each group's transaction:
            // no later group, and no other process, commits in between.
            log.setGroupReader { [weak surveys] events, connection in
                guard let surveys, surveys.isActive else { return nil }
                return surveys.triggered(by: events(), in: connection)
            }
            log.setCommitHandler { [weak delivery, weak uploader] _, head, events, reading in
                // The rows are built only when someone will look at them.
                if let delivery, delivery.isListening { delivery.enqueue(events(), triggered: reading as? [[Survey]]) }
                uploader?.committed(head: head)
            }
            log.setFailureHandler { [diagnosticsCenter] failure in diagnosticsCenter.report(failure) }
            delivery.setFollower(surveys)
            try await events.durables.open(log, owner: leaseOwner)
        } catch {
            // Leave nothing half-started: the engine can be started again.
            await stopUploader()
            uploaderBox.withLock { $0 = nil }
            await closeDatabase(log)
            throw SpoolError.bridge(error)
        }
        let closedMeanwhile = state.withLock { state -> Bool in
            guard state.phase != .closed else { return true }
            state.log = log
            state.phase = .started
            state.opening = nil
            if case .withdrawnBeforeStart = state.uploads {
                // Consent was withdrawn before start: what the queue held
                // when the file was opened is never uploaded.
                startDiscard(in: &state) { headAtOpen }
            }
            return false
        }
        if closedMeanwhile {
            // close() ran while this was opening: close what was opened.
            await stopUploader()
            await closeDatabase(log)
            throw SpoolError.closed
        }
        log.database.onDeferredWork.withLock { handler in
            handler = { [weak self] in self?.runDeferredWorkInBackgroundWindow() }
        }
        startObservingLifecycle()
        startSession()
        // Ready fires once the start-up events (session_start and those
        // recorded before start) are committed and delivered; start() returns
        // after it fired. A commit failure here is already reported as a
        // diagnostic, and the events stay buffered: ready fires regardless.
        do { try await log.waitUntilAllDurable() } catch {}
        delivery.async { [events] in
            events.registrations.latch(.ready, .ready(at: Date().timeIntervalSince1970))
        }
        await delivery.drain()
    }

    /// Opens the database off the caller's executor (it does file I/O).
    private static func openDatabase(_ configuration: EngineConfiguration) async throws -> DatabaseQueue {
        // Unstructured: opening and migrating blocks on file I/O, never on the caller's executor.
        try await Task.detached(priority: .userInitiated) {
            try SpoolError.bridging {
                try DatabaseQueue(
                    path: configuration.database.path,
                    options: ConnectionOptions(fullSynchronous: configuration.synchronous == .full))
            }
        }.value
    }

    /// Gives up every lease this engine holds, so another process sharing
    /// the file takes over at once rather than when they expire.
    private func releaseLeases(_ log: EventLog) async {
        let owner = leaseOwner
        let attached = events.durables.close()
        do {
            try await log.database.run { try $0.releaseLeases(owner: owner) }
        } catch {
            // Nothing is lost: a lease left behind expires by itself. Each is
            // reported under the kind of what it holds up.
            // try?: when even the read fails, what this engine may hold stands for it.
            let held = try? await log.database.run { try $0.consumers(leasedBy: owner) }
            let durablePrefix = DurableListeners.Durable.consumerPrefix
            if held.map({ $0.contains(Uploader.consumerID) }) ?? (uploaderBox.withLock { $0 } != nil) {
                diagnosticsCenter.report(
                    .uploadFailed, error: SpoolError.bridge(error),
                    "the upload lease could not be released at close; another process uploads once it expires")
            }
            if held.map({ $0.contains { $0.hasPrefix(durablePrefix) } }) ?? attached {
                diagnosticsCenter.report(
                    .durableListenerStalled, error: SpoolError.bridge(error),
                    "durable listener leases could not be released at close; they expire by themselves")
            }
        }
    }

    /// Lets go of everything the log's handlers and the delivery queue hold.
    private func detach(_ log: EventLog) {
        log.setCommitHandler(nil)
        log.setGroupReader(nil)
        log.setFailureHandler(nil)
        delivery.setFollower(nil)
    }

    /// Commits everything accepted, delivers what is committed, saves durable
    /// positions and closes the database. Records after this fail with
    /// ``SpoolError/closed``. Events still waiting for a session are stored
    /// without one.
    ///
    /// An upload in flight gets a few seconds to finish so its answer is
    /// saved; if it does not, its events are sent again later (at least
    /// once). Streams end, registrations are dropped, and another process
    /// sharing the file takes over the uploader and durable listeners at
    /// once. A closed engine cannot be started again: create a new one.
    ///
    /// Called while ``start()`` is still opening the database, it returns
    /// once `start()` has closed what it opened (`start()` then throws
    /// ``SpoolError/closed``).
    ///
    /// Events that cannot be committed (the disk is full) are reported as an
    /// ``SpoolDiagnostic/Kind/uncommittedAtClose`` diagnostic, and returned.
    ///
    /// - Returns: how many accepted events could not be committed (0 normally).
    @discardableResult
    public func close() async -> Int {
        let (log, waiting, opening, alreadyClosed) = state.withLock {
            state -> (EventLog?, [Waiting], Promise<Void>?, Bool) in
            guard state.phase != .closed else { return (nil, [], nil, true) }
            state.phase = .closed
            return (state.log, state.gates.takeWaiting(), state.opening, false)
        }
        guard !alreadyClosed else { return 0 }  // a second close() has nothing left to do
        // A start() still opening sees the phase and closes what it opened.
        await opening?.value
        stopObservingLifecycle()
        log?.database.resume()  // what close() commits and saves needs the file
        guard let log else {
            for entry in waiting { entry.settle?(.failed(SpoolError.closed)) }
            finishSubscribers()
            return 0
        }
        for var entry in waiting {
            entry.record.sessionID = nil
            do {
                entry.settle?(.appended(try log.appendPastBound(entry.record), log))
            } catch {
                entry.settle?(.failed(SpoolError.bridge(error)))
            }
        }
        await stopUploader()
        let report = await log.close()
        if report.uncommitted > 0 {
            diagnosticsCenter.report(
                .uncommittedAtClose, eventCount: report.uncommitted, error: report.error.map(SpoolError.bridge),
                "\(report.uncommitted) accepted events could not be committed before the database closed")
        }
        await delivery.drain()
        await closeDatabase(log)
        finishSubscribers()
        return report.uncommitted
    }

    /// With the uploader stopped: gives up every lease, lets go of what the
    /// log's handlers and the delivery queue hold, and closes the database.
    private func closeDatabase(_ log: EventLog) async {
        await releaseLeases(log)
        detach(log)
        log.database.close()
    }

    /// Ends every stream and drops every registration and diagnostic handler.
    private func finishSubscribers() {
        events.finishAll()
        surveys.finishAll()
        diagnosticsCenter.finishAll()
    }

    /// Returns once every event accepted so far is committed and delivered,
    /// including events that listeners recorded while handling them.
    package func settle() async throws {
        guard let log = state.withLock({ $0.log }) else { return }
        var seen = UInt64.max
        while log.acceptedCount != seen {
            seen = log.acceptedCount
            try await log.waitUntilAllDurable()
            await delivery.drain()
        }
    }

    /// The open event log, for package-level tools (spool-bench reads how
    /// much waits for the writer).
    package var eventLog: EventLog? {
        state.withLock { $0.log }
    }

    /// The open database's queue, for package-level tools (spool-bench).
    package var databaseQueue: DatabaseQueue? {
        state.withLock { $0.log?.database }
    }

    // MARK: - Diagnostics

    /// Every diagnostic from now on, as an `AsyncSequence` (on the delivery
    /// queue, in order with events); it ends when the engine closes.
    ///
    /// ```swift
    /// for await diagnostic in engine.diagnostics() {
    ///     logger.error("\(diagnostic)")
    /// }
    /// ```
    public func diagnostics() -> AsyncStream<SpoolDiagnostic> {
        diagnosticsCenter.stream()
    }

    /// How often each kind of diagnostic was reported, and for how many
    /// events, since the engine was created.
    ///
    /// Updated as soon as a diagnostic is reported, before the handler and
    /// streams are called on the delivery queue.
    public var diagnosticCounts: DiagnosticCounts {
        diagnosticsCenter.snapshot
    }

    // MARK: - Sessions

    /// Starts a new session (ending the current one, if any): records
    /// `session_start` and delivers the events that were waiting for it.
    /// ``start()`` calls this; call it again when your app's session rules say
    /// a new one begins.
    public func startSession() {
        let sessionID = EventID.make(
            milliseconds: EventID.milliseconds(since1970: Date().timeIntervalSince1970),
            random: UInt64.random(in: 0...UInt64.max),
            UInt64.random(in: 0...UInt64.max))
        let (notify, sessionStartError) = state.withLock {
            state -> ([(Waiting, WaitingOutcome)], (any Error)?) in
            guard state.phase == .started, let log = state.log else { return ([], nil) }
            let waiting = state.gates.startSession(sessionID)
            var notify: [(Waiting, WaitingOutcome)] = []
            var sessionStartError: (any Error)?
            if state.enabled && state.consent {
                do {
                    // Under the engine's lock: never wait for room here.
                    try log.appendPastBound(
                        EventRecord(
                            name: Self.sessionStartEventName, parametersJSON: "{}",
                            recordedAt: Date().timeIntervalSince1970,
                            sessionID: sessionID, priority: true, addsToHistory: true))
                } catch {
                    sessionStartError = SpoolError.bridge(error)
                }
            }
            for entry in waiting {
                let outcome: WaitingOutcome
                do {
                    outcome = .appended(try log.appendPastBound(entry.record), log)
                } catch {
                    outcome = .failed(SpoolError.bridge(error))
                }
                if entry.settle != nil { notify.append((entry, outcome)) }
            }
            return (notify, sessionStartError)
        }
        if let sessionStartError {
            diagnosticsCenter.report(.sessionStartFailed, error: sessionStartError, "session_start was not recorded")
        }
        for (entry, outcome) in notify { entry.settle?(outcome) }
    }

    /// Ends the current session. Events recorded until the next
    /// ``startSession()`` wait for it and count toward its limit.
    public func endSession() {
        state.withLock { $0.gates.endSession() }
    }

    /// The current session's id (a UUIDv7 string), or nil before ``start()``
    /// and after ``endSession()``. Every event stored during the session
    /// carries it.
    public var currentSessionID: String? {
        state.withLock { $0.gates.sessionID }
    }

    // MARK: - Consent and switches

    /// The user's data-collection consent. While false, nothing is recorded,
    /// delivered or uploaded: `record` returns
    /// ``RecordOutcome/droppedOptedOut``, and events waiting for a session
    /// are discarded (a `recordDurably` waiting on one returns
    /// `droppedOptedOut`).
    ///
    /// Withdrawing consent also discards the upload queue: nothing recorded
    /// before is uploaded after, when consent returns, in this process or the
    /// next. The events stay in the database for durable listeners and the
    /// survey history (``withdrawConsent(erasingData:)`` can erase them, and
    /// returns once the queue is discarded); uploads wait until the discard
    /// is saved.
    ///
    /// The discard reaches as far as the last event this engine appended;
    /// called before ``start()``, it reaches everything an earlier process
    /// left queued, discarded when `start()` opens the file. An engine
    /// *configured* with ``EngineConfiguration/consent`` false ("not granted
    /// yet") keeps that queue until consent is withdrawn by this call;
    /// ``eraseAllData()`` removes it either way.
    public func setConsent(_ consent: Bool) {
        let discarded = state.withLock { state -> [Waiting] in
            state.gates.consent = consent
            guard !consent else { return [] }
            guard let log = state.log else {
                // Not started (or closed): the queue an earlier process left
                // is discarded when start() opens it.
                if state.phase == .idle || state.phase == .starting { state.uploads = .withdrawnBeforeStart }
                return state.gates.takeWaiting()
            }
            // Which events are "before" is settled now, under this lock:
            // everything appended so far (also when an earlier withdrawal's
            // discard still runs: this one follows it). The position arrives
            // once they are committed.
            let position = Promise<Result<Int64, any Error>>()
            log.positionOfLastAppended(position.fulfill)
            startDiscard(in: &state) { try await position.value.get() }
            return state.gates.takeWaiting()
        }
        for entry in discarded { entry.settle?(.dropped(.droppedOptedOut)) }
    }

    /// Turns recording on or off. While off, `record` drops events
    /// (``RecordOutcome/droppedDisabled``) and nothing is uploaded; events
    /// already stored stay queued.
    public func setEnabled(_ enabled: Bool) {
        state.withLock { $0.gates.enabled = enabled }
    }

    /// Replaces the names that are stored and uploaded but never delivered to
    /// listeners, as a remote configuration would.
    ///
    /// Applies to events delivered from now on, including those committed but
    /// not yet delivered. `flush_event` stays excluded whatever you pass.
    public func setExcludedEventNames(_ names: Set<String>) {
        state.withLock { $0.undelivered = names.union([ReservedEventName.heartbeat]) }
    }

    // MARK: - Registrations

    /// Calls `callback` on the delivery queue for every delivered event
    /// matching `topic`, until the returned registration is cancelled.
    ///
    /// The callback gets each event once, after its commit, in record order,
    /// after the plain listeners. Events the gates dropped, `flush_event` and
    /// excluded names never reach it. Recording from inside the callback is
    /// allowed; the new event is delivered later.
    ///
    /// For `.ready`: fires once when ``start()`` settles; subscribing after
    /// that calls `callback` at once, on the caller's thread, exactly once.
    ///
    /// ```swift
    /// let registration = engine.on("purchase") { event in
    ///     print(event.id, event.parameters)
    /// }
    /// registration.cancel()
    /// ```
    ///
    /// - Returns: a handle; discarding it does not cancel the subscription.
    @discardableResult
    public func on(_ topic: EventTopic, _ callback: @escaping @Sendable (RecordedEvent) -> Void) -> Registration {
        events.registrations.add(topic, callback)
    }
}
