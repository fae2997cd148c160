import Foundation
import SpoolStorage

// MARK: - Durable listeners across processes
//
// A durable listener id belongs to one process at a time. The process that
// attaches it first holds a lease on its consumer row (renewed every
// `durableLeaseRenewal` while attached, released when it is removed or the
// engine closes); another process adding the same id delivers nothing to it
// — it reports `durableListenerHeldElsewhere` and tries again when that lease
// ends, then resumes from the saved position. A killed holder's lease expires
// after `durableLeaseDuration`.

extension EventEngine {
    /// How long a durable listener's lease lasts without renewal.
    static let durableLeaseDuration: TimeInterval = 60
    /// How often an attached listener's lease is renewed.
    static let durableLeaseRenewal: TimeInterval = 20

    /// Gives every durable listener its consumer row and starts its catch-up,
    /// and wires later `addDurableObserver` calls to do the same.
    func attachDurableListeners(_ log: EventLog) async throws {
        let added: @Sendable (EventObservers.Durable) -> Void = { [weak self] durable in
            log.database.async { [weak self] connection in
                guard let self, let connection else { return }
                self.attach(durable, log: log, connection: connection)
            }
        }
        let removed: @Sendable (String, Bool) -> Void = { [weak self] id, forget in
            // Through the database queue, so it lands after an attach that
            // an earlier addDurableObserver queued there.
            log.database.async { [weak self] connection in
                guard let self else { return }
                self.delivery.detach(id)
                self.heldDurables.withLock { _ = $0.held.remove(id) }
                let consumer = EventObservers.Durable.consumerID(for: id)
                do {
                    guard let connection else { throw StorageError.closed }
                    if forget {
                        try connection.removeConsumer(consumer)
                    } else {
                        try connection.releaseLease(consumer, owner: self.leaseOwner)
                    }
                } catch {
                    // A lease left behind expires; a row left behind keeps its
                    // events until the retention bound: reported, not lost.
                    self.diagnosticsCenter.report(
                        .durableListenerStalled, error: SpoolError.bridge(error),
                        "durable listener \(id) could not be \(forget ? "forgotten" : "released")")
                }
            }
        }
        events.durableHooks.withLock { $0 = EventObservers.DurableHooks(added: added, removed: removed) }
        for durable in events.durableSnapshot() {
            try await SpoolError.bridgingAsync {
                try await log.database.run { [self] connection in attach(durable, log: log, connection: connection) }
            }
        }
        // Let the catch-ups finish and their positions reach the database
        // queue before start-up appends anything, so the retention bound
        // counts drops from where each listener really is.
        await delivery.drain()
    }

    /// Takes `durable`'s lease and starts its delivery (on the database
    /// queue, so every later commit reaches the delivery queue after it).
    ///
    /// Held by another process, it tries again every few seconds (a dead
    /// holder's lease is taken at once), reporting it once.
    private func attach(
        _ durable: EventObservers.Durable, log: EventLog, connection: Connection, reportHeld: Bool = true
    ) {
        log.database.assertOnQueue()
        // Still wanted? It may have been removed or replaced meanwhile.
        guard events.durableSnapshot().contains(where: { $0 === durable }) else { return }
        let consumer = durable.consumerID
        let owner = leaseOwner
        do {
            let attached = try connection.transaction { () -> (position: Int64, head: Int64, missed: Int)? in
                let position = try connection.registerConsumer(consumer, startingAt: .end)
                if let lease = try connection.acquireLease(
                    consumer, owner: owner, now: Date().timeIntervalSince1970, duration: Self.durableLeaseDuration)
                {
                    let wait = max(0.2, min(5, lease.expires - Date().timeIntervalSince1970))
                    if reportHeld {
                        diagnosticsCenter.report(
                            .durableListenerHeldElsewhere,
                            "durable listener \(durable.id) is attached in another process (\(lease.owner)); "
                                + "it is attached here once that process lets go or is gone")
                    }
                    retryAttach(durable, log: log, after: wait)
                    return nil
                }
                let missed = try connection.takeUnreportedDrops(of: consumer)
                return (position, try connection.headPosition(), missed)
            }
            guard let attached else { return }
            let startRenewing = heldDurables.withLock { leases -> Bool in
                leases.held.insert(durable.id)
                defer { leases.renewing = true }
                return !leases.renewing
            }
            if startRenewing { renewDurableLeases(log, after: Self.durableLeaseRenewal) }
            delivery.attach(durable, at: attached.position, head: attached.head, missed: attached.missed)
        } catch {
            diagnosticsCenter.report(
                .durableListenerStalled, error: SpoolError.bridge(error),
                "durable listener \(durable.id) could not be attached; it is tried again when added again")
        }
    }

    /// Tries to attach `durable` again after `delay`; while the database is
    /// suspended, a few seconds later again, without waking it.
    private func retryAttach(_ durable: EventObservers.Durable, log: EventLog, after delay: TimeInterval) {
        log.database.timer(after: delay) { [weak self, weak log] firing in
            guard let self, let log else { return }
            switch firing {
            case .awake(let connection): self.attach(durable, log: log, connection: connection, reportHeld: false)
            case .suspended: self.retryAttach(durable, log: log, after: delay)
            case .closed: return
            }
        }
    }

    /// Renews this engine's durable-listener leases every
    /// ``durableLeaseRenewal`` while it holds any (no timer runs without
    /// durable listeners); a lease found taken over (this process was
    /// suspended past its expiry) detaches the listener here and tries to
    /// attach it again later. While the database is suspended a renewal is
    /// skipped rather than waking it: the leases may lapse, and the next
    /// renewal after resuming finds out.
    private func renewDurableLeases(_ log: EventLog, after delay: TimeInterval) {
        // Weak: a pending renewal must not keep a dropped engine's log alive.
        log.database.timer(after: delay) { [weak self, weak log] firing in
            guard let self, let log else { return }
            let connection: Connection
            switch firing {
            case .awake(let awake): connection = awake
            case .suspended: return self.renewDurableLeases(log, after: Self.durableLeaseRenewal)
            case .closed: return
            }
            let held = self.heldDurables.withLock { leases -> Set<String> in
                if leases.held.isEmpty { leases.renewing = false }  // the next attach starts renewing again
                return leases.held
            }
            guard !held.isEmpty else { return }
            do {
                let renewed = try connection.renewLeases(
                    owner: self.leaseOwner, prefix: EventObservers.Durable.consumerID(for: ""),
                    now: Date().timeIntervalSince1970, duration: Self.durableLeaseDuration)
                for id in held where !renewed.contains(EventObservers.Durable.consumerID(for: id)) {
                    self.heldDurables.withLock { _ = $0.held.remove(id) }
                    self.delivery.detach(id)
                    if let durable = self.events.durableSnapshot().first(where: { $0.id == id }) {
                        self.attach(durable, log: log, connection: connection)
                    }
                }
            } catch {
                self.diagnosticsCenter.report(
                    .durableListenerStalled, error: SpoolError.bridge(error),
                    "durable listener leases could not be renewed")
            }
            self.renewDurableLeases(log, after: Self.durableLeaseRenewal)
        }
    }
}
