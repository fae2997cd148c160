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
    let uploadResultCenter: UploadResultCenter
    let uploaderBox = Protected<Uploader?>(nil)
    /// The identity and context each accepted event is stamped with.
    let identities: IdentityBook
    /// Held across an identity change and the message that goes with it
    /// (`identify`, `alias`, `reset`), so that no other change comes between
    /// them; recursive, for a middleware that calls one of them.
    let identityCalls = NSRecursiveLock()
    /// The middleware every event passes before it is encoded.
    let pipeline = Pipeline()
    /// This engine's name in the lease columns (the uploader's, durable listeners').
    let leaseOwner = LeaseOwner.make()
    /// Seals and opens personal values (``EngineConfiguration/encryption``).
    let sealer: RowSealer?
    /// Reports the rows whose sealed values would not open, set aside by
    /// any connection of the engine's (``SpoolDiagnostic/Kind/undecryptableRows``).
    let undecryptable: @Sendable (Int) -> Void
    /// Bit `n` is set when a priority event name is `n` UTF-8 bytes long
    /// (modulo 64): most names are not priority, and this answers for them
    /// without hashing the name.
    let priorityNameLengths: UInt64

    struct State {
        /// Where the engine is in its life; what each phase holds exists only
        /// in that phase.
        enum Phase {
            case idle
            /// ``start()`` is opening the database: `opened` is fulfilled once
            /// it has returned, so a `close()` meanwhile waits for it to
            /// close what it opened.
            case starting(opened: Promise<Void>)
            case started(EventLog)
            /// ``close()`` is committing and closing the log `start()` opened
            /// (nil when it opened none).
            case closing(EventLog?)
            case closed

            /// The open log: while started, and while closing.
            var log: EventLog? {
                switch self {
                case .started(let log): return log
                case .closing(let log): return log
                case .idle, .starting, .closed: return nil
                }
            }
        }

        var phase = Phase.idle {
            didSet { log = phase.log }
        }
        /// The phase's log, kept beside it so that `record` uses it in place:
        /// reading it out of the enum would move its reference count, which
        /// the writer's thread moves too, on every call.
        private(set) var log: EventLog?
        /// Consent, the switch, the session and the events waiting for one.
        var gates: SessionGates
        /// Names never delivered: the configured exclusions and the heartbeat.
        var undelivered: Set<String>
        /// The event properties the history keeps (event name → keys), as
        /// the survey center last declared them, and that declaration's
        /// version.
        var keptProperties: (version: Int, byName: [String: [String]]) = (0, [:])
        /// Whether the uploader may run: consent withdrawn means the events
        /// before it are being discarded, and nothing uploads until that is
        /// saved.
        var uploads = Uploads.allowed
        /// How many discards were started: only the latest lets uploads go on.
        var discards = 0
        /// The app is in the background (its database suspended), as the
        /// platform last said; also before ``start()`` (a launch in the
        /// background).
        var inBackground = false
        /// The device is locked: files with complete protection cannot be
        /// read or written, so the database is suspended.
        var protectedDataUnavailable = false
        /// A background activity uploads and suspends now
        /// (``EventEngine/applicationDidEnterBackground()``), and another
        /// report came meanwhile: it runs once more.
        var goingToBackground = false
        var backgroundAgain = false
        /// Background windows running now, each in time the system granted:
        /// the database stays awake until the last one ends.
        var awakeWindows = 0
        /// The platform's lifecycle reports, stopped at close.
        var observation: PlatformObservation?
        /// What start() did with a database file it could not use.
        var salvage: SalvageReport?
        /// The upload policy set while running (or before start()); nil:
        /// the configuration's.
        var uploadPolicy: UploadPolicy?

        var consent: Bool { gates.consent }
        var enabled: Bool { gates.enabled }

        var isStarted: Bool {
            if case .started = phase { return true }
            return false
        }

        /// ``close()`` was called.
        var isClosed: Bool {
            switch phase {
            case .closing, .closed: return true
            case .idle, .starting, .started: return false
            }
        }

        /// Whether the database should stay suspended (outside the short
        /// windows for work that arrives): in the background, or while the
        /// files cannot be touched.
        func wantsSuspension(_ configuration: EngineConfiguration) -> Bool {
            isStarted && ((inBackground && configuration.suspendsInBackground) || isLockedOut(configuration))
        }

        /// Whether to suspend the database now: it should be suspended and no
        /// background window keeps it awake, or the files cannot be touched.
        func suspendsNow(_ configuration: EngineConfiguration) -> Bool {
            wantsSuspension(configuration) && (awakeWindows == 0 || isLockedOut(configuration))
        }

        /// The device is locked and the files have complete protection: no
        /// file I/O can succeed, so none is attempted (no window either).
        func isLockedOut(_ configuration: EngineConfiguration) -> Bool {
            protectedDataUnavailable && configuration.fileProtection == .complete
        }
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
        priorityNameLengths = configuration.priorityEventNames.reduce(0) { $0 | 1 << ($1.utf8.count & 63) }
        let identities = IdentityBook(at: configuration.clock.now)
        self.identities = identities
        let state = Protected(
            State(
                gates: SessionGates(
                    consent: configuration.consent, enabled: configuration.enabled,
                    sessionEventLimit: configuration.sessionEventLimit,
                    waitingLimit: configuration.retainedEvents ?? EngineConfiguration.defaultRetainedEvents),
                undelivered: configuration.excludedEventNames.union([ReservedEventName.heartbeat])))
        self.state = state
        let deliveryQueue = DispatchQueue(label: "spool.delivery", qos: .utility)
        let diagnostics = DiagnosticsCenter(
            handler: configuration.diagnosticHandler, queue: deliveryQueue, clock: configuration.clock)
        diagnosticsCenter = diagnostics
        sealer = configuration.encryption?.makeSealer()
        undecryptable = { count in
            diagnostics.report(
                .undecryptableRows, eventCount: count,
                "\(count) sealed values would not open: their events moved to the dead letters (reason undecryptable)")
        }
        sealer?.onKeyNotFollowed { problem in diagnostics.report(.encryptionKeyNotFollowed, problem) }
        uploadResultCenter = UploadResultCenter(handler: configuration.uploadResultHandler, queue: deliveryQueue)
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
                diagnostics: diagnostics,
                keep: { version, properties in
                    state.withLock { state in
                        guard version > state.keptProperties.version else { return }
                        state.keptProperties = (version, properties.mapValues { $0.sorted() })
                    }
                },
                session: { state.withLock { $0.gates.sessionID } },
                identity: {
                    let stamp = identities.current.identity
                    return (stamp.anonymousID, stamp.user.traitsJSON)
                }))
        delivery = DeliveryQueue(
            queue: deliveryQueue, observers: events, durables: durables, policy: policy)
        engine.withLock { $0 = WeakBox(self) }
    }

    deinit {
        // Dropped without close(): let go of what the log's handlers hold, so
        // the log, its database queue and its connections are freed once the
        // writer has committed what is buffered.
        let (log, observation) = state.withLock { ($0.log, $0.observation) }
        if let log {
            log.setCommitHandler(nil)
            log.setGroupReader(nil)
            log.setFailureHandler(nil)
        }
        observation?.cancel()
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
