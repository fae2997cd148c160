import Foundation
import SpoolStorage

extension EventEngine {
    // MARK: - Sessions

    /// Starts a new session (ending the current one, if any): records
    /// `session_start` and delivers the events that were waiting for it.
    /// ``start()`` calls this; call it again when your app's session rules say
    /// a new one begins.
    public func startSession() {
        let sessionID = EventID.make(
            milliseconds: EventID.milliseconds(since1970: configuration.clock.now),
            random: UInt64.random(in: 0...UInt64.max),
            UInt64.random(in: 0...UInt64.max))
        let (notify, sessionStartError) = state.withLock {
            state -> ([(Waiting, WaitingOutcome)], (any Error)?) in
            guard case .started(let log) = state.phase else { return ([], nil) }
            let waiting = state.gates.startSession(sessionID)
            var notify: [(Waiting, WaitingOutcome)] = []
            var sessionStartError: (any Error)?
            if state.enabled && state.consent {
                do {
                    // Under the engine's lock: never wait for room here.
                    try log.appendPastBound(
                        EventRecord(
                            name: Self.sessionStartEventName, parametersJSON: "{}",
                            recordedAt: configuration.clock.now,
                            sessionID: sessionID, priority: true, addsToHistory: true,
                            stamps: identities.current))
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
    /// `droppedOptedOut`). ``identify(userId:traits:)``, ``alias(_:)``,
    /// ``reset()`` and ``setContext(_:)`` change the identity and context in
    /// memory only: no user id, traits or context reaches the file until
    /// consent is given, when the identity then in force is written.
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
                if !state.isClosed { state.uploads = .withdrawnBeforeStart }
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
        // Given: the identity changed meanwhile is written now.
        if consent { persistIdentity() }
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
}
