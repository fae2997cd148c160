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
/// session limit), and appends to the group-commit buffer; everything else
/// happens on Spool's own queues.
public final class EventEngine: Sendable {
    /// The heartbeat: stored and uploaded, never delivered to listeners.
    public static let heartbeatEventName = ReservedEventName.heartbeat
    /// Recorded when a session starts; delivered like any event.
    public static let sessionStartEventName = ReservedEventName.sessionStart

    public let configuration: EngineConfiguration
    /// The listener registry.
    public let events: EventObservers
    /// Surveys, trigger rules and lifecycle events.
    public let surveys: SurveyCenter

    let state: Protected<State>
    package let delivery: DeliveryQueue
    let uploaderBox = Protected<Uploader?>(nil)

    struct State {
        enum Phase { case idle, starting, started, closed }

        var phase = Phase.idle
        var consent: Bool
        var enabled: Bool
        /// Names never delivered: the configured exclusions and the heartbeat.
        var undelivered: Set<String>
        var sessionID: String?
        /// Non-priority events counted toward the current (or upcoming) session.
        var sessionCount = 0
        /// Events accepted while no session runs, in order (L2), at most
        /// `waitingLimit`.
        var waiting: [Waiting] = []
        var waitingDropped = 0
        var log: EventLog?
    }

    struct Waiting {
        var record: EventRecord
        var onAppended: (@Sendable (Result<AppendReceipt, any Error>) -> Void)?
    }

    /// Creates an engine. No I/O happens until ``start()``.
    public init(configuration: EngineConfiguration = EngineConfiguration()) {
        self.configuration = configuration
        let events = EventObservers()
        self.events = events
        let state = Protected(
            State(
                consent: configuration.consent, enabled: configuration.enabled,
                undelivered: configuration.excludedEventNames.union([ReservedEventName.heartbeat])))
        self.state = state
        // The survey center records through this engine without holding it.
        let engine = Protected<WeakBox<EventEngine>?>(nil)
        surveys = SurveyCenter(
            context: SurveyCenter.Context(
                record: { name, parameters in
                    guard let engine = engine.withLock({ $0?.object }) else { throw SpoolError.closed }
                    return try engine.record(name, parameters: parameters)
                },
                database: { state.withLock { $0.log?.database } }))
        delivery = DeliveryQueue(observers: events) {
            state.withLock { DeliveryQueue.DeliveryPolicy(consent: $0.consent, undelivered: $0.undelivered) }
        }
        engine.withLock { $0 = WeakBox(self) }
    }

    // MARK: - Lifecycle

    /// Opens and migrates the database, starts a session (recording
    /// `session_start`), delivers the events recorded before it, and fires
    /// `.ready`.
    ///
    /// - Throws: ``SpoolError`` or ``SQLiteError`` when the database cannot be
    ///   opened; the engine can then be started again.
    public func start() async throws {
        try state.withLock { state in
            switch state.phase {
            case .idle: state.phase = .starting
            case .closed: throw SpoolError.closed
            case .starting, .started: throw SpoolError.invalidConfiguration("start() was already called")
            }
        }
        let log: EventLog
        do {
            let configuration = self.configuration
            let database = try await Self.openDatabase(configuration)
            log = EventLog(database: database)
            log.setMaximumRetainedEvents(configuration.effectiveRetention)
            if let retention = configuration.historyRetention {
                let cutoff = Date().timeIntervalSince1970 - retention
                _ = try await database.run { try $0.pruneHistory(before: cutoff) }
            }
        } catch {
            state.withLock { $0.phase = .idle }
            throw error
        }
        do {
            let uploader = try await startUploader(log)
            log.setCommitHandler { [delivery] committed in
                delivery.enqueue(committed)
                if let uploader { Task { await uploader.committed(committed.count) } }
            }
            delivery.attach(log, follower: surveys)
            try await attachDurableListeners(log)
        } catch {
            // Leave nothing half-started: the engine can be started again.
            await stopUploader()
            uploaderBox.withLock { $0 = nil }
            log.database.close()
            state.withLock { $0.phase = .idle }
            throw error
        }
        let closedMeanwhile = state.withLock { state -> Bool in
            guard state.phase != .closed else { return true }
            state.log = log
            state.phase = .started
            return false
        }
        if closedMeanwhile {
            // close() ran while this was opening: close what was opened.
            await stopUploader()
            log.database.close()
            throw SpoolError.closed
        }
        startSession()
        // Ready fires once the start-up events (session_start and those
        // recorded before start) are committed and delivered; start() returns
        // after it fired.
        try? await log.waitUntilAllDurable()
        delivery.async { [events] in
            events.registrations.latch(.ready, .ready(at: Date().timeIntervalSince1970))
        }
        await delivery.drain()
    }

    /// Opens the database off the caller's executor (it does file I/O).
    private static func openDatabase(_ configuration: EngineConfiguration) async throws -> DatabaseQueue {
        // Unstructured on purpose: opening and migrating is blocking file I/O
        // that must not run on the caller's executor (often the main actor).
        try await Task.detached(priority: .userInitiated) {
            try SpoolError.bridging {
                try DatabaseQueue(
                    path: configuration.database.path,
                    options: ConnectionOptions(fullSynchronous: configuration.synchronous == .full))
            }
        }.value
    }

    /// Commits everything accepted, delivers what is committed, saves durable
    /// positions and closes the database. Records after this fail with
    /// ``SpoolError/closed``. Events still waiting for a session are stored
    /// without one.
    public func close() async {
        let (log, waiting) = state.withLock { state -> (EventLog?, [Waiting]) in
            state.phase = .closed
            defer { state.waiting.removeAll() }
            return (state.log, state.waiting)
        }
        guard let log else {
            for entry in waiting { entry.onAppended?(.failure(SpoolError.closed)) }
            events.finishAll()
            return
        }
        for var entry in waiting {
            entry.record.sessionID = nil
            let result = Result { try log.append(entry.record) }
            entry.onAppended?(result)
        }
        await stopUploader()
        try? await log.close()
        await delivery.drain()
        events.finishAll()
        surveys.finishAll()
        log.database.close()
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

    // MARK: - Sessions

    /// Starts a new session (ending the current one, if any): records
    /// `session_start` and delivers the events that were waiting for it.
    /// ``start()`` calls this; call it again when your app's session rules say
    /// a new one begins.
    public func startSession() {
        let sessionID = EventID.make(
            milliseconds: UInt64(Date().timeIntervalSince1970 * 1000), random: UInt64.random(in: 0...UInt64.max),
            UInt64.random(in: 0...UInt64.max))
        let notify = state.withLock { state -> [(Waiting, Result<AppendReceipt, any Error>)] in
            guard state.phase == .started, let log = state.log else { return [] }
            if state.sessionID != nil { state.sessionCount = 0 }
            state.sessionID = sessionID
            var notify: [(Waiting, Result<AppendReceipt, any Error>)] = []
            if state.enabled && state.consent {
                _ = try? log.append(
                    EventRecord(
                        name: Self.sessionStartEventName, parametersJSON: "{}",
                        recordedAt: Date().timeIntervalSince1970,
                        sessionID: sessionID, priority: true, addsToHistory: true))
            }
            for var entry in state.waiting {
                entry.record.sessionID = sessionID
                let result = Result { try log.append(entry.record) }
                if entry.onAppended != nil { notify.append((entry, result)) }
            }
            state.waiting.removeAll()
            return notify
        }
        for (entry, result) in notify { entry.onAppended?(result) }
    }

    /// Ends the current session. Events recorded until the next
    /// ``startSession()`` wait for it and count toward its limit.
    public func endSession() {
        state.withLock { state in
            state.sessionID = nil
            state.sessionCount = 0
        }
    }

    /// The current session's id, if one runs.
    public var currentSessionID: String? {
        state.withLock { $0.sessionID }
    }

    // MARK: - Consent and switches

    /// The user's data-collection consent (L3). While false, nothing is
    /// recorded or delivered; events waiting for a session are discarded.
    public func setConsent(_ consent: Bool) {
        state.withLock { state in
            state.consent = consent
            if !consent { state.waiting.removeAll() }
        }
    }

    /// Turns recording on or off (L3). While off, `record` drops events.
    public func setEnabled(_ enabled: Bool) {
        state.withLock { $0.enabled = enabled }
    }

    /// Replaces the names that are stored and uploaded but never delivered to
    /// listeners, as a remote configuration would (L6).
    public func setExcludedEventNames(_ names: Set<String>) {
        state.withLock { $0.undelivered = names.union([ReservedEventName.heartbeat]) }
    }

    // MARK: - Registrations

    /// Calls `callback` on the delivery queue for every delivered event
    /// matching `topic`, until the returned registration is cancelled.
    ///
    /// For `.ready`: fires once when ``start()`` settles; subscribing after
    /// that calls `callback` at once, on the caller's thread, exactly once (S6).
    @discardableResult
    public func on(_ topic: EventTopic, _ callback: @escaping @Sendable (RecordedEvent) -> Void) -> Registration {
        events.registrations.add(topic, callback)
    }
}
