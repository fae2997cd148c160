import Foundation
import SpoolStorage

/// Every durable listener's state, in one place: the listeners added
/// (``EventObservers`` is their public face), the leases this engine holds
/// on their consumer rows and the timer that renews them, and, on the
/// delivery queue, each attached listener's delivered and saved position
/// (`DurableListeners+Delivery.swift`).
///
/// A durable listener id belongs to one process at a time. The process that
/// attaches it first holds a lease on its consumer row (renewed every
/// ``leaseRenewal`` while attached, released when it is removed or the
/// engine closes); another process adding the same id delivers nothing to
/// it — it reports `durableListenerHeldElsewhere` and tries again when that
/// lease ends, then resumes from the saved position. A killed holder's lease
/// expires after ``leaseDuration``.
final class DurableListeners: @unchecked Sendable {
    // Safe: `positions` is only touched on `queue`, the delivery queue (each
    // entry point checks); everything else is in `state`.

    /// A listener with its own position in the log (a consumer row named
    /// `listener:<id>`), so it resumes after a crash or restart.
    final class Durable: Sendable {
        let id: String
        let listener: WeakBox<any EventListener>
        let onMissed: (@Sendable (Int) -> Void)?

        init(id: String, listener: any EventListener, onMissed: (@Sendable (Int) -> Void)?) {
            self.id = id
            self.listener = WeakBox(listener)
            self.onMissed = onMissed
        }

        var consumerID: String { Self.consumerID(for: id) }

        static func consumerID(for id: String) -> String { consumerPrefix + id }

        /// What every durable listener's consumer row is named after.
        static let consumerPrefix = "listener:"
    }

    /// How long a durable listener's lease lasts without renewal.
    static let leaseDuration: TimeInterval = 60
    /// How often an attached listener's lease is renewed.
    static let leaseRenewal: TimeInterval = 20

    private struct State {
        /// The listeners added, by id.
        var added: [String: Durable] = [:]
        /// The ids whose lease this engine holds: attached here.
        var held: Set<String> = []
        /// Whether the renewal timer runs (only while some lease is held).
        var renewing = false
        /// The open log and this engine's name in the lease columns, from
        /// ``open(_:owner:)`` to ``close()``.
        var database: (log: EventLog, owner: String)?
    }

    private let state = Protected(State())
    let queue: DispatchQueue
    let diagnostics: DiagnosticsCenter
    let policy: @Sendable () -> DeliveryQueue.DeliveryPolicy
    /// On `queue`: each attached listener's positions, by id.
    var positions: [String: Position] = [:]
    /// On `queue`: how far each listener detached here got, by id. Its saved
    /// position can trail that (it is saved per commit group): one added
    /// again in this engine starts after what it was given, not from there.
    var detachedThrough: [String: Int64] = [:]
    /// The last position this engine's erasure erased: no listener, durable
    /// or not, is given an event at or before it.
    let erasedThrough = Protected<Int64>(.min)

    /// - Parameter queue: the delivery queue, where listeners are called.
    init(
        queue: DispatchQueue, diagnostics: DiagnosticsCenter,
        policy: @escaping @Sendable () -> DeliveryQueue.DeliveryPolicy
    ) {
        self.queue = queue
        self.diagnostics = diagnostics
        self.policy = policy
    }

    /// Whether this engine holds any listener's lease: the writer then builds
    /// each group's rows for delivery.
    var anyHeld: Bool { state.withLock { !$0.held.isEmpty } }

    /// The open log, while there is one.
    var log: EventLog? { state.withLock { $0.database?.log } }

    // MARK: - Adding and removing

    /// Adds `durable` (replacing one with its id) and, with a database open,
    /// attaches it.
    func add(_ durable: Durable) {
        let log = state.withLock { state -> EventLog? in
            state.added[durable.id] = durable
            return state.database?.log
        }
        // On the database queue, so every later commit reaches the delivery
        // queue after the attach.
        log?.database.async { [weak self] connection in
            guard let self, let log, let connection else { return }
            self.attach(durable, log: log, connection: connection)
        }
    }

    /// Removes the listener `id`; with `forget`, its consumer row too.
    func remove(_ id: String, forget: Bool) {
        let database = state.withLock { state -> (log: EventLog, owner: String)? in
            state.added[id] = nil
            return state.database
        }
        guard let (log, owner) = database else { return }
        // Through the database queue, so it lands after an attach that an
        // earlier `add` queued there.
        log.database.async { [weak self] connection in
            guard let self else { return }
            self.detach(id)
            let consumer = Durable.consumerID(for: id)
            do {
                guard let connection else { throw StorageError.closed }
                if forget {
                    try connection.removeConsumer(consumer)
                } else {
                    try connection.releaseLease(consumer, owner: owner)
                }
            } catch {
                // A lease left behind expires; a row left behind keeps its
                // events until the retention bound: reported, not lost.
                self.diagnostics.report(
                    .durableListenerStalled, error: SpoolError.bridge(error),
                    "durable listener \(id) could not be \(forget ? "forgotten" : "released")")
            }
        }
    }

    // MARK: - Opening and closing

    /// Gives every listener added so far its consumer row and lease and
    /// starts its catch-up; later ``add(_:)`` calls do the same.
    func open(_ log: EventLog, owner: String) async throws {
        let added = state.withLock { state -> [Durable] in
            state.database = (log, owner)
            return Array(state.added.values)
        }
        for durable in added {
            try await SpoolError.bridgingAsync {
                try await log.database.run { [self] connection in attach(durable, log: log, connection: connection) }
            }
        }
        // Let the catch-ups finish and their positions reach the database
        // queue before start-up appends anything, so the retention bound
        // counts drops from where each listener really is.
        await withCheckedContinuation { continuation in queue.async { continuation.resume() } }
    }

    /// Lets go of the log: nothing attaches, renews or saves from now on.
    ///
    /// - Returns: whether some listener's lease was held (the caller
    ///   releases every lease this engine holds).
    func close() -> Bool {
        queue.async {
            self.positions.removeAll()
            self.detachedThrough.removeAll()
        }
        return state.withLock { state in
            state.database = nil
            defer { state.held.removeAll() }
            return !state.held.isEmpty
        }
    }

    /// After the file under the log was replaced (a salvage while running
    /// closed positions up): every listener attached here starts again
    /// from its position in the new file, as when it was first attached.
    /// On the database queue.
    func reattach(_ log: EventLog, connection: Connection) {
        let held = state.withLock { state -> [Durable] in
            defer { state.held.removeAll() }
            return state.held.compactMap { state.added[$0] }
        }
        for durable in held {
            // The new file's positions are not the old one's.
            queue.async {
                self.positions[durable.id] = nil
                self.detachedThrough[durable.id] = nil
            }
            attach(durable, log: log, connection: connection, reportHeld: false)
        }
    }

    // MARK: - Leases (on the database queue)

    /// Takes `durable`'s lease and starts its delivery (on the database
    /// queue, so every later commit reaches the delivery queue after it).
    ///
    /// Held by another process, it tries again every few seconds (a dead
    /// holder's lease is taken at once), reporting it once.
    private func attach(_ durable: Durable, log: EventLog, connection: Connection, reportHeld: Bool = true) {
        log.database.assertOnQueue()
        // Still wanted, and still open? It may have been removed, replaced or
        // closed meanwhile.
        let owner = state.withLock { $0.added[durable.id] === durable ? $0.database?.owner : nil }
        guard let owner else { return }
        let consumer = durable.consumerID
        do {
            let attached = try connection.transaction { () -> (position: Int64, head: Int64, missed: Int)? in
                let position = try connection.registerConsumer(consumer, startingAt: .end)
                if let lease = try connection.acquireLease(
                    consumer, owner: owner, now: log.database.clock.now, duration: Self.leaseDuration)
                {
                    let wait = max(0.2, min(5, lease.expires - log.database.clock.now))
                    if reportHeld {
                        diagnostics.report(
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
            let startRenewing = state.withLock { state -> Bool in
                state.held.insert(durable.id)
                defer { state.renewing = true }
                return !state.renewing
            }
            if startRenewing { renewLeases(log, after: Self.leaseRenewal) }
            startDelivering(durable, at: attached.position, head: attached.head, missed: attached.missed)
        } catch {
            diagnostics.report(
                .durableListenerStalled, error: SpoolError.bridge(error),
                "durable listener \(durable.id) could not be attached; it is tried again when added again")
        }
    }

    /// Tries to attach `durable` again after `delay`; while the database is
    /// suspended, a few seconds later again, without waking it.
    private func retryAttach(_ durable: Durable, log: EventLog, after delay: TimeInterval) {
        log.database.timer(after: delay) { [weak self, weak log] firing in
            guard let self, let log else { return }
            switch firing {
            case .awake(let connection): self.attach(durable, log: log, connection: connection, reportHeld: false)
            case .suspended: self.retryAttach(durable, log: log, after: delay)
            case .closed: return
            }
        }
    }

    /// Stops delivering to `id` here: its lease is no longer held.
    private func detach(_ id: String) {
        state.withLock { _ = $0.held.remove(id) }
        queue.async {
            if let position = self.positions.removeValue(forKey: id) {
                self.detachedThrough[id] = max(self.detachedThrough[id] ?? .min, position.deliveredThrough)
            }
        }
    }

    /// Renews this engine's leases every ``leaseRenewal`` while it holds any
    /// (no timer runs without durable listeners); a lease found taken over
    /// (this process was suspended past its expiry) detaches the listener
    /// here and tries to attach it again. While the database is suspended a
    /// renewal is skipped rather than waking it: the leases may lapse, and
    /// the next renewal after resuming finds out.
    private func renewLeases(_ log: EventLog, after delay: TimeInterval) {
        // Weak: a pending renewal must not keep a dropped engine's log alive.
        log.database.timer(after: delay) { [weak self, weak log] firing in
            guard let self, let log else { return }
            let connection: Connection
            switch firing {
            case .awake(let awake): connection = awake
            case .suspended: return self.renewLeases(log, after: Self.leaseRenewal)
            case .closed: return
            }
            let (held, owner) = self.state.withLock { state -> (Set<String>, String?) in
                if state.held.isEmpty { state.renewing = false }  // the next attach starts renewing again
                return (state.held, state.database?.owner)
            }
            guard !held.isEmpty, let owner else { return }
            do {
                let renewed = try connection.renewLeases(
                    owner: owner, prefix: Durable.consumerPrefix, now: log.database.clock.now,
                    duration: Self.leaseDuration)
                for id in held where !renewed.contains(Durable.consumerID(for: id)) {
                    self.detach(id)
                    if let durable = self.state.withLock({ $0.added[id] }) {
                        self.attach(durable, log: log, connection: connection)
                    }
                }
                // What other processes committed meanwhile reaches nobody
                // here until this engine commits: catch up to the head.
                self.catchUp(to: try connection.headPosition())
            } catch {
                self.diagnostics.report(
                    .durableListenerStalled, error: SpoolError.bridge(error),
                    "durable listener leases could not be renewed")
            }
            self.renewLeases(log, after: Self.leaseRenewal)
        }
    }
}
