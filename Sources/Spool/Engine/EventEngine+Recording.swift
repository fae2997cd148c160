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
    /// - Returns: what happened to it: recorded, queued until a session
    ///   starts, or dropped by a gate (consent, enabled, session limit). A
    ///   gated event is never stored, delivered or uploaded.
    /// - Throws: ``SpoolError/invalidEvent(_:)`` for a bad name or parameters
    ///   (nothing else is affected); ``SpoolError/closed`` after `close()`.
    @discardableResult
    public func record(_ name: String, parameters: [String: EventValue] = [:]) throws -> RecordOutcome {
        try accept(name, parameters: parameters, onQueuedAppend: nil).outcome
    }

    /// Records one event and returns once it is durable (committed), or once it
    /// was gated.
    ///
    /// An event recorded before a session starts returns when the session
    /// starts and its commit lands.
    @discardableResult
    public func recordDurably(_ name: String, parameters: [String: EventValue] = [:]) async throws -> RecordOutcome {
        let waiter = AppendWaiter()
        let accepted = try accept(name, parameters: parameters, onQueuedAppend: waiter.deliver)
        switch accepted.outcome {
        case .recorded:
            if let log = accepted.log, let receipt = accepted.receipt { try await log.waitUntilDurable(receipt) }
        case .queuedUntilSessionStart:
            let receipt = try await waiter.value()
            let log = state.withLock { $0.log }
            try await log?.waitUntilDurable(receipt)
            return .recorded(id: receipt.id)
        default:
            break
        }
        return accepted.outcome
    }

    /// The most events held while no session runs.
    var waitingLimit: Int { configuration.effectiveRetention ?? DefaultEventDispatcher.defaultMaxQueueSize }

    /// Events that gave way while waiting for a session (the waiting queue is
    /// bounded like the log; the oldest go first).
    public var eventsDroppedWhileWaitingForSession: Int {
        state.withLock { $0.waitingDropped }
    }

    private struct Accepted {
        var outcome: RecordOutcome
        var receipt: AppendReceipt?
        var log: EventLog?
    }

    private func accept(
        _ name: String, parameters: [String: EventValue],
        onQueuedAppend: (@Sendable (Result<AppendReceipt, any Error>) -> Void)?
    ) throws -> Accepted {
        // 1. Validation and encoding, outside any lock.
        let json: String
        do {
            try EventEncoder.validate(name: name)
            json = try EventEncoder.encode(parameters)
        } catch {
            throw SpoolError.invalidEvent(error)
        }
        let now = Date().timeIntervalSince1970
        let priority = configuration.priorityEventNames.contains(name)
        let limit = configuration.sessionEventLimit
        var record = EventRecord(
            name: name, parametersJSON: json, recordedAt: now, priority: priority,
            addsToHistory: name != Self.heartbeatEventName, attachment: parameters)
        // 2. Gates and the append, under one lock so events waiting for a
        // session are always appended before later ones.
        return try state.withLock { state in
            guard state.phase != .closed else { throw SpoolError.closed }
            guard state.enabled else { return Accepted(outcome: .droppedDisabled) }
            guard state.consent else { return Accepted(outcome: .droppedOptedOut) }
            if !priority, let limit {
                guard state.sessionCount < limit else { return Accepted(outcome: .droppedSessionLimit) }
                state.sessionCount += 1
            }
            guard let log = state.log, let sessionID = state.sessionID else {
                // Bounded like the log: past it the oldest waiting event gives way.
                if state.waiting.count >= waitingLimit {
                    let dropped = state.waiting.removeFirst()
                    state.waitingDropped += 1
                    let notify = dropped.onAppended
                    DispatchQueue.global().async { notify?(.failure(SpoolError.droppedWhileWaitingForSession)) }
                }
                state.waiting.append(Waiting(record: record, onAppended: onQueuedAppend))
                return Accepted(outcome: .queuedUntilSessionStart)
            }
            record.sessionID = sessionID
            let receipt = try log.append(record)
            return Accepted(outcome: .recorded(id: receipt.id), receipt: receipt, log: log)
        }
    }
}

/// A one-shot hand-off of an append receipt to an awaiting `recordDurably`.
private final class AppendWaiter: Sendable {
    private let state = Protected<
        (result: Result<AppendReceipt, any Error>?, continuation: CheckedContinuation<AppendReceipt, any Error>?)
    >((nil, nil))

    var deliver: @Sendable (Result<AppendReceipt, any Error>) -> Void {
        { result in
            let continuation = self.state.withLock { state in
                defer { state.continuation = nil }
                if state.continuation == nil { state.result = result }
                return state.continuation
            }
            continuation?.resume(with: result)
        }
    }

    func value() async throws -> AppendReceipt {
        try await withCheckedThrowingContinuation { continuation in
            let ready = state.withLock { state in
                if state.result == nil { state.continuation = continuation }
                return state.result
            }
            if let ready { continuation.resume(with: ready) }
        }
    }
}
