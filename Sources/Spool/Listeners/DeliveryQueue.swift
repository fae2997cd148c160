import Foundation
import SpoolStorage

/// Work that follows listeners on the delivery queue, once per commit group,
/// in log order: the engine gives it survey trigger matching.
protocol DeliveryFollower: Sendable {
    /// False when there is nothing to do (no surveys): delivery skips it.
    var isActive: Bool { get }
    /// Called on the delivery queue after the group's listeners ran, with
    /// the surveys each event triggers, found inside the group's
    /// transaction (nil: none were registered then), and what may be
    /// delivered now: an event listeners do not get (opted out, an excluded
    /// name) triggers nothing either.
    func follow(_ events: [StoredEvent], triggering surveys: [[Survey]]?, allowing allows: (String) -> Bool)
}

/// The one internal serial queue every listener, registration and stream is
/// called on, in log order, after the event's commit; survey triggers and
/// the diagnostics handler and streams run on it too.
///
/// Events reach it from the event log's commit handler in commit groups. A
/// listener that records an event from inside its callback only appends to
/// the log; that event comes back through here later, so delivery never
/// recurses.
package final class DeliveryQueue: @unchecked Sendable {
    // Safe: `durables`, `log` and `follower` are only touched on `queue`
    // (each entry point checks with dispatchPrecondition).
    private let queue: DispatchQueue
    private let observers: EventObservers
    private let diagnostics: DiagnosticsCenter
    private let policy: @Sendable () -> DeliveryPolicy
    private var durables: [String: DurableState] = [:]
    private var log: EventLog?
    private var follower: (any DeliveryFollower)?
    /// Read from the writer's thread: whether anything could want a commit
    /// group (durable listeners attached, a follower set).
    private let hasConsumers = Protected((durables: false, follower: nil as (any DeliveryFollower)?))

    /// What may be delivered right now.
    struct DeliveryPolicy: Sendable {
        var consent: Bool
        /// Names stored and uploaded but never delivered (the heartbeat and
        /// the configured exclusions).
        var undelivered: Set<String>

        /// Nothing is delivered while opted out.
        func allows(_ name: String) -> Bool {
            consent && !undelivered.contains(name)
        }
    }

    private struct DurableState {
        let durable: EventObservers.Durable
        var deliveredThrough: Int64
        var savedThrough: Int64
    }

    /// How many stored events one catch-up read fetches.
    static let catchUpPage = 256

    /// - Parameter queue: a serial queue of its own; diagnostics are reported
    ///   on it too, in order with deliveries.
    init(
        queue: DispatchQueue, observers: EventObservers, diagnostics: DiagnosticsCenter,
        policy: @escaping @Sendable () -> DeliveryPolicy
    ) {
        self.queue = queue
        self.observers = observers
        self.diagnostics = diagnostics
        self.policy = policy
    }

    /// Uses `log` for catch-ups and positions, and `follower` after each group.
    func attach(_ log: EventLog?, follower: (any DeliveryFollower)?) {
        hasConsumers.withLock { $0.follower = follower }
        queue.async {
            self.log = log
            self.follower = follower
        }
    }

    /// Whether committed events would reach anyone: a listener, a
    /// registration or stream, a durable listener, or an active follower
    /// (surveys). When not, the writer need not even build them.
    var isListening: Bool {
        let (durables, follower) = hasConsumers.withLock { ($0.durables, $0.follower) }
        return durables || follower?.isActive == true || !observers.isEmpty || !observers.registrations.isEmpty
    }

    // MARK: - Live delivery

    /// Delivers committed events (called on the database queue), and then
    /// the survey triggers found for them in their transaction.
    package func enqueue(_ events: [StoredEvent], triggered: [[Survey]]? = nil) {
        queue.async { self.deliver(events, triggered) }
    }

    private func deliver(_ events: [StoredEvent], _ triggered: [[Survey]]?) {
        dispatchPrecondition(condition: .onQueue(queue))
        let policy = self.policy()
        let hasObservers = !observers.isEmpty || !observers.registrations.isEmpty
        let follower = self.follower?.isActive == true ? self.follower : nil
        guard hasObservers || follower != nil || !durables.isEmpty else { return }
        for event in events {
            let allowed = policy.allows(event.name)
            let listeners = allowed && hasObservers ? observers.snapshot() : []
            let entries =
                allowed && hasObservers ? observers.registrations.snapshot(.named(event.name), .everyEvent) : []
            // Parsed from the stored JSON once per event, and only when
            // someone gets it (a registration for another name does not).
            let parameters =
                allowed && (!listeners.isEmpty || !entries.isEmpty || !durables.isEmpty)
                ? event.deliveredParameters : nil
            if let parameters { deliverToObservers(event, parameters, listeners, entries) }
            deliverToDurables(event, parameters: parameters, policy: policy)
        }
        follower?.follow(events, triggering: triggered, allowing: policy.allows)
        savePositions()
    }

    private func deliverToObservers(
        _ stored: StoredEvent, _ parameters: [String: EventValue], _ listeners: [WeakBox<any EventListener>],
        _ entries: [SubscriptionRegistry<EventTopic, RecordedEvent>.Entry]
    ) {
        for listener in listeners {
            listener.object?.onEventRecorded(stored.name, parameters: parameters, timestamp: stored.recordedAt)
        }
        guard !entries.isEmpty else { return }
        let recorded = RecordedEvent(stored, parameters: parameters)
        for entry in entries { entry.callback(recorded) }
    }

    // MARK: - Durable listeners

    /// Starts delivering to `durable` from `position` (on the queue): first
    /// the stored events after it up to `head` (the log's head when the
    /// position was read), then live ones. `missed` is what the retention
    /// bound dropped while it was away.
    ///
    /// Call from the database queue, so every commit after `head` reaches
    /// this queue after the attach.
    func attach(_ durable: EventObservers.Durable, at position: Int64, head: Int64, missed: Int) {
        queue.async {
            if missed > 0 { durable.onMissed?(missed) }
            var state = DurableState(durable: durable, deliveredThrough: position, savedThrough: position)
            self.catchUp(&state, before: head + 1, policy: self.policy())
            self.durables[durable.id] = state
            self.hasConsumers.withLock { $0.durables = true }
            self.savePositions()
        }
    }

    func detach(_ id: String) {
        queue.async {
            self.durables[id] = nil
            let any = !self.durables.isEmpty
            self.hasConsumers.withLock { $0.durables = any }
        }
    }

    /// `parameters` are the delivered parameters, nil when the policy does
    /// not let this event through (its position still advances).
    private func deliverToDurables(_ stored: StoredEvent, parameters: [String: EventValue]?, policy: DeliveryPolicy) {
        guard !durables.isEmpty else { return }
        for id in durables.keys {
            guard var state = durables[id], state.durable.listener.object != nil else { continue }
            guard stored.seq > state.deliveredThrough else { continue }
            if stored.seq > state.deliveredThrough + 1 {
                catchUp(&state, before: stored.seq, policy: policy)
            }
            if let parameters, let listener = state.durable.listener.object {
                listener.onEventRecorded(stored.name, parameters: parameters, timestamp: stored.recordedAt)
            }
            state.deliveredThrough = stored.seq
            durables[id] = state
        }
    }

    /// Delivers stored events after the listener's position (and before
    /// `limit`, when given), telling it about any that the retention bound
    /// removed first.
    private func catchUp(_ state: inout DurableState, before limit: Int64?, policy: DeliveryPolicy) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let log else { return }
        while true {
            let after = state.deliveredThrough
            let page: [StoredEvent]
            do {
                page = try log.database.sync { try $0.readEvents(after: after, limit: Self.catchUpPage) }
            } catch {
                // The position stays: the next event (or attach) tries again.
                diagnostics.report(
                    .durableListenerStalled, error: error,
                    "durable listener \(state.durable.id) could not read the events after \(after)")
                return
            }
            let events = limit.map { limit in page.filter { $0.seq < limit } } ?? page
            if let first = events.first, first.seq > after + 1 {
                reportMissed(Int(clamping: first.seq - after - 1), to: state.durable)
            }
            for event in events {
                // A dead letter put back for the uploader was delivered when
                // it was recorded.
                if !event.uploaderOnly, policy.allows(event.name), let listener = state.durable.listener.object {
                    listener.onEventRecorded(
                        event.name, parameters: EventValue.parameters(fromJSON: event.parametersJSON),
                        timestamp: event.recordedAt)
                }
                state.deliveredThrough = event.seq
            }
            if page.count < Self.catchUpPage || events.count < page.count { break }
        }
        // Everything between the position and `limit` was dropped.
        if let limit, state.deliveredThrough < limit - 1 {
            reportMissed(Int(clamping: limit - 1 - state.deliveredThrough), to: state.durable)
            state.deliveredThrough = limit - 1
        }
    }

    /// Tells a listener it missed `count` events, counted from its in-memory
    /// position (exact), and marks the database's count for it reported.
    private func reportMissed(_ count: Int, to durable: EventObservers.Durable) {
        durable.onMissed?(count)
        let consumer = durable.consumerID
        // try?: if marking fails, the listener may be told of these drops once
        // more at its next attach; no event is lost or held back by it.
        log?.database.async { connection in try? connection?.markDropsReported(of: consumer) }
    }

    /// Writes advanced durable positions (and deletes the prefix every
    /// consumer finished), off this queue.
    ///
    /// An attached listener hears every committed event from this queue, even
    /// ones the retention bound has already deleted from the log, so drops
    /// counted against its (lagging) saved position are not real: they are
    /// marked reported with the save. Real drops happen only while it is away
    /// (told at the next attach) or show up as gaps in a catch-up (told then).
    private func savePositions() {
        guard let log else { return }
        for (id, state) in durables where state.deliveredThrough > state.savedThrough {
            let consumer = state.durable.consumerID
            let (saved, position) = (state.savedThrough, state.deliveredThrough)
            log.database.async { [diagnostics] connection in
                do {
                    guard let connection else { throw StorageError.closed }
                    try connection.transaction {
                        try connection.advanceConsumerInTransaction(consumer, to: position)
                        try connection.markDropsReported(of: consumer)
                    }
                } catch {
                    // The next save covers these too; until then a restart
                    // delivers them again (at least once).
                    diagnostics.report(
                        .positionSaveFailed, eventCount: Int(clamping: position - saved), error: error,
                        "durable listener \(id) could not save its position \(position)")
                }
            }
            durables[id]?.savedThrough = position
        }
    }

    /// Every event up to `head` was erased: durable listeners stand there now
    /// (the database already moved their positions), so the gap is no drop.
    func erased(through head: Int64) {
        queue.async {
            for (id, var state) in self.durables {
                state.deliveredThrough = max(state.deliveredThrough, head)
                state.savedThrough = max(state.savedThrough, head)
                self.durables[id] = state
            }
        }
    }

    // MARK: - Draining

    /// Returns once everything enqueued so far has been delivered.
    package func drain() async {
        await withCheckedContinuation { continuation in
            queue.async { continuation.resume() }
        }
    }

    /// Runs `body` on the delivery queue, in order with deliveries.
    func async(_ body: @escaping @Sendable () -> Void) {
        queue.async(execute: body)
    }
}

extension StoredEvent {
    /// The parameters as listeners receive them, read back from the stored
    /// JSON (dates are already strings there). Parsing here, once per event
    /// for every listener, costs about a microsecond on the delivery queue;
    /// keeping each event's parameters in memory until its commit cost the
    /// write buffer about 900 bytes an event.
    var deliveredParameters: [String: EventValue] {
        EventValue.parameters(fromJSON: parametersJSON)
    }
}
