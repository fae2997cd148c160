import Foundation
import SpoolStorage

extension EventEngine {
    /// Records one event.
    ///
    /// Validation and encoding happen on the caller's thread (a few
    /// microseconds for ten parameters); then the event is appended to the
    /// group-commit buffer and this returns. Listeners get it on the delivery
    /// queue after its commit.
    ///
    /// The buffer is bounded (``EngineConfiguration/writeBuffer``). When it is
    /// full, `record` first waits for the writer to take it — normally a few
    /// milliseconds, the time of one group commit — and never drops an event
    /// already accepted to make room. Code running on Spool's database queue
    /// (a custom dispatcher's callback) never waits.
    ///
    /// - Returns: what happened to it: recorded, queued until a session
    ///   starts, or dropped by a gate (consent, enabled, session limit). A
    ///   gated event is never stored, delivered or uploaded.
    /// - Throws: ``SpoolError/invalidEvent(_:)`` for a bad name or parameters
    ///   (nothing else is affected); ``SpoolError/bufferFull(events:bytes:)``
    ///   when the buffer is full and commits keep failing (a full disk), or
    ///   the writer made no room within 2 seconds (another process holding
    ///   the file's write lock); ``SpoolError/closed`` after `close()`. A
    ///   thrown event was not accepted: it will never be stored.
    @discardableResult
    public func record(_ name: String, parameters: [String: EventValue] = [:]) throws -> RecordOutcome {
        try accept(Message(name, parameters), settle: nil).outcome
    }

    /// Records one event and returns once it is durable (committed), or once
    /// a gate dropped it.
    ///
    /// An event recorded before a session starts returns when the session
    /// starts and its commit lands; if consent is withdrawn meanwhile it
    /// returns ``RecordOutcome/droppedOptedOut``, and if newer events push it
    /// out of the bounded waiting queue,
    /// ``RecordOutcome/droppedWhileWaitingForSession``.
    ///
    /// - Returns: ``RecordOutcome/recorded(id:)`` once committed, or the
    ///   gate that dropped the event (never stored).
    /// - Throws: ``SpoolError/stillBuffered(eventID:reason:)`` when the commit
    ///   failed (disk full): the event was accepted and stays buffered; Spool
    ///   commits it when the database accepts writes again, so do **not**
    ///   record it again. Any other error means the event will never be
    ///   stored: ``SpoolError/invalidEvent(_:)``,
    ///   ``SpoolError/bufferFull(events:bytes:)``, ``SpoolError/closed``
    ///   (also when the engine closed before a waiting event could be
    ///   stored), ``SpoolError/erased`` (it waited for a session when
    ///   ``eraseAllData()`` ran), or ``SpoolError/sqlite(_:)`` when the database
    ///   refused that one row.
    @discardableResult
    public func recordDurably(_ name: String, parameters: [String: EventValue] = [:]) async throws -> RecordOutcome {
        let waiter = Promise<WaitingOutcome>()
        let accepted = try accept(Message(name, parameters), settle: waiter.fulfill)
        switch accepted.outcome {
        case .recorded:
            guard let log = accepted.log, let receipt = accepted.receipt else { return accepted.outcome }
            try await waitUntilDurable(receipt, in: log)
            return accepted.outcome
        case .queuedUntilSessionStart:
            switch await waiter.value {
            case .appended(let receipt, let log):
                try await waitUntilDurable(receipt, in: log)
                return .recorded(id: receipt.id)
            case .dropped(let outcome):
                return outcome
            case .failed(let error):
                throw error
            }
        default:
            return accepted.outcome
        }
    }

    /// Waits for one receipt, saying in the public error what a failure means.
    private func waitUntilDurable(_ receipt: AppendReceipt, in log: EventLog) async throws {
        do {
            try await log.waitUntilDurable(receipt)
        } catch StorageError.notYetCommitted(let error) {
            throw SpoolError.stillBuffered(eventID: receipt.id, reason: SpoolError.SQLiteFailure(error))
        } catch {
            throw SpoolError.bridge(error)
        }
    }

    struct Accepted {
        var outcome: RecordOutcome
        var receipt: AppendReceipt?
        var log: EventLog?
        /// A waiting event that gave way to this one.
        var displaced: Waiting?
    }

    /// One message as a public method received it.
    struct Message {
        var name: String
        var parameters: [String: EventValue]
        var type = EventType.track
        /// A group's id, or an alias's previous user id.
        var target: String?

        init(_ name: String, _ parameters: [String: EventValue], type: EventType = .track, target: String? = nil) {
            self.name = name
            self.parameters = parameters
            self.type = type
            self.target = target
        }
    }

    /// Runs the middleware over `message`, changing it in place.
    ///
    /// - Returns: nil when it goes on; the outcome of its drop otherwise.
    func passMiddleware(_ message: inout Message) -> Accepted? {
        switch pipeline.run(PipelineEvent(name: message.name, parameters: message.parameters, type: message.type)) {
        case nil:
            return nil
        case .keep(let event)?:
            (message.name, message.parameters) = (event.name, event.parameters)
            return nil
        case .drop(let reason)?:
            diagnosticsCenter.report(.eventDroppedByMiddleware, eventCount: 1, "\(message.name): \(reason)")
            return Accepted(outcome: .droppedByMiddleware(reason: reason))
        case .failed(let error)?:
            diagnosticsCenter.report(
                .middlewareFailed, eventCount: 1, error: error,
                "a middleware threw for \(message.name); the event was dropped, not stored")
            return Accepted(outcome: .droppedByMiddleware(reason: "a middleware threw: \(error)"))
        }
    }

    /// - Parameter passedMiddleware: the message went through the
    ///   middleware already (``passMiddleware(_:)``).
    func accept(
        _ message: Message, settle: (@Sendable (WaitingOutcome) -> Void)?, passedMiddleware: Bool = false
    ) throws -> Accepted {
        var message = message
        // 1. The middleware, then validation and encoding, outside any lock.
        if !passedMiddleware, let dropped = passMiddleware(&message) { return dropped }
        let name = message.name
        try EventEncoder.validate(name: name)
        let json = try EventEncoder.encode(message.parameters)
        let priority =
            priorityNameLengths & 1 << (name.utf8.count & 63) != 0 && configuration.priorityEventNames.contains(name)
        // Moved, not copied, into the buffer or the waiting queue.
        var record: EventRecord? = EventRecord(
            name: name, parametersJSON: json, recordedAt: 0, priority: priority,
            addsToHistory: message.type == .track && ReservedEventName.entersHistory(name),
            type: message.type.rawValue, target: message.target)
        let bytes = record?.bufferedBytes ?? 0
        // 2. Gates and the append, under one lock so events waiting for a
        // session are always appended before later ones. When the write
        // buffer is full, wait for the writer outside the lock and try again.
        while true {
            let accepted = try state.withLock { state in
                // The time, the identity and the context in force, read in
                // the lock that orders the appends: an event never carries
                // an older identity or context than an event before it in
                // the log, nor a time before its session's start (a
                // `thisSession` rule counts from there).
                record?.recordedAt = configuration.clock.now
                record?.stamps = identities.current
                // The values a registered survey's filters read, kept with
                // the event's occurrence in the history.
                if !state.keptProperties.byName.isEmpty, record?.addsToHistory == true,
                    let keys = state.keptProperties.byName[name],
                    let values = Self.historyValues(keys, of: message.parameters)
                {
                    record?.keep(values)
                }
                return try gateAndAppend(&record, priority: priority, settle: settle, in: &state)
            }
            guard let accepted else {
                do { try state.withLock { $0.log }?.waitForRoom(bytes: bytes) } catch { throw SpoolError.bridge(error) }
                continue
            }
            if let displaced = accepted.displaced {
                diagnosticsCenter.report(
                    .droppedWhileWaitingForSession, eventCount: 1,
                    "an event waiting for a session gave way to a newer one; it was never stored")
                displaced.settle?(.dropped(.droppedWhileWaitingForSession))
            }
            return accepted
        }
    }

    /// The values of `keys` in `parameters` that the history keeps (nil:
    /// none).
    static func historyValues(_ keys: [String], of parameters: [String: EventValue]) -> HistoryValues? {
        let entries = keys.compactMap { key in parameters[key]?.historyValue.map { HistoryValues.Entry(key, $0) } }
        return entries.isEmpty ? nil : HistoryValues(entries)
    }

    /// The gates, then the append (or the wait for a session), which moves
    /// `record` out. nil when the write buffer has no room: nothing changed,
    /// wait and call again.
    private func gateAndAppend(
        _ record: inout EventRecord?, priority: Bool, settle: (@Sendable (WaitingOutcome) -> Void)?,
        in state: inout State
    ) throws -> Accepted? {
        guard !state.isClosed else { throw SpoolError.closed }
        let decision = state.gates.decide(priority: priority, hasLog: state.log != nil)
        guard case .append(let sessionID) = decision, state.log != nil else {
            if case .drop(let outcome) = decision { return Accepted(outcome: outcome) }
            guard let waiting = record.take() else { preconditionFailure("gateAndAppend(_:) needs an event") }
            // Bounded like the log: past it the oldest waiting event gives way.
            let displaced = state.gates.wait(Waiting(record: waiting, settle: settle), priority: priority)
            return Accepted(outcome: .queuedUntilSessionStart, displaced: displaced)
        }
        record?.sessionID = sessionID
        // The log is used in place and kept only for a caller that waits for
        // durability: its reference count, which the writer's thread also
        // moves, is left alone by a plain record().
        let receipt: AppendReceipt?
        do {
            receipt = try state.log?.tryAppend(&record)
        } catch {
            throw SpoolError.bridge(error)  // not accepted: it does not count toward the session
        }
        guard let receipt else { return nil }
        state.gates.count(priority: priority)
        return Accepted(outcome: .recorded(id: receipt.id), receipt: receipt, log: settle == nil ? nil : state.log)
    }
}
