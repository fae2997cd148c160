import Foundation

/// The one internal serial queue every listener, registration and stream is
/// called on, in log order, after the event's commit (L8).
///
/// Events reach it from the event log's commit handler in commit groups. A
/// listener that records an event from inside its callback only appends to
/// the log; that event comes back through here later, so delivery never
/// recurses (L5).
final class DeliveryQueue: @unchecked Sendable {
    // Safe: `durables` and `log` are only touched on `queue` (after `init`).
    let queue = DispatchQueue(label: "spool.delivery", qos: .utility)
    private let observers: EventObservers
    private let surveys: SurveyCenter
    private let policy: @Sendable () -> DeliveryPolicy
    private var durables: [String: DurableState] = [:]
    private var log: EventLog?

    /// What may be delivered right now.
    struct DeliveryPolicy {
        var consent: Bool
        var excluded: Set<String>

        /// flush_event (the heartbeat) and excluded names are stored and
        /// uploaded but never delivered (L6); nothing is while opted out (L3).
        func allows(_ name: String) -> Bool {
            consent && name != EventEngine.heartbeatEventName && !excluded.contains(name)
        }
    }

    private struct DurableState {
        let durable: EventObservers.Durable
        var deliveredThrough: Int64
        var savedThrough: Int64
    }

    /// How many stored events one catch-up read fetches.
    static let catchUpPage = 256

    init(observers: EventObservers, surveys: SurveyCenter, policy: @escaping @Sendable () -> DeliveryPolicy) {
        self.observers = observers
        self.surveys = surveys
        self.policy = policy
    }

    func attach(_ log: EventLog) {
        queue.async { self.log = log }
    }

    // MARK: - Live delivery

    /// Delivers committed events (called on the database queue).
    func enqueue(_ events: [CommittedEvent]) {
        queue.async { self.deliver(events) }
    }

    private func deliver(_ events: [CommittedEvent]) {
        let policy = self.policy()
        let hasObservers = !observers.snapshot().isEmpty || !observers.registrations.isEmpty
        let hasSurveys = surveys.hasSurveys
        guard hasObservers || hasSurveys || !durables.isEmpty else { return }
        for event in events {
            let stored = event.stored
            // Built once per event, for everyone it is delivered to.
            let parameters =
                policy.allows(stored.name) && (hasObservers || !durables.isEmpty)
                ? event.parameters?.delivered ?? Self.parse(stored.parametersJSON) : nil
            if hasObservers, let parameters { deliverToObservers(stored, parameters) }
            deliverToDurables(stored, parameters: parameters, policy: policy)
        }
        if hasSurveys, let database = log?.database { surveys.consider(events, database: database) }
        savePositions()
    }

    private func deliverToObservers(_ stored: StoredEvent, _ parameters: [String: EventValue]) {
        for entry in observers.snapshot() {
            entry.listener?.onEventRecorded(stored.name, parameters: parameters, timestamp: stored.recordedAt)
        }
        let (named, every) = observers.registrations.snapshot(for: stored.name)
        guard !named.isEmpty || !every.isEmpty else { return }
        let recorded = RecordedEvent(
            id: stored.id, seq: stored.seq, name: stored.name, parameters: parameters, timestamp: stored.recordedAt,
            sessionID: stored.sessionID)
        for entry in named { entry.callback(recorded) }
        for entry in every { entry.callback(recorded) }
    }

    static func parse(_ json: String) -> [String: EventValue] {
        (try? JSONReader.parseObject(json)) ?? [:]
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
            self.savePositions()
        }
    }

    func detach(_ id: String) {
        queue.async { self.durables[id] = nil }
    }

    /// `parameters` are the delivered parameters, nil when the policy does
    /// not let this event through (its position still advances).
    private func deliverToDurables(_ stored: StoredEvent, parameters: [String: EventValue]?, policy: DeliveryPolicy) {
        guard !durables.isEmpty else { return }
        for id in durables.keys {
            guard var state = durables[id], state.durable.listener != nil else { continue }
            guard stored.seq > state.deliveredThrough else { continue }
            if stored.seq > state.deliveredThrough + 1 {
                catchUp(&state, before: stored.seq, policy: policy)
            }
            if let parameters, let listener = state.durable.listener {
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
        guard let log else { return }
        while true {
            let after = state.deliveredThrough
            let page: [StoredEvent]
            do {
                page = try log.database.sync { try $0.readEvents(after: after, limit: Self.catchUpPage) }
            } catch {
                return  // closed or failing: the position stays, the events are retried next time
            }
            let events = limit.map { limit in page.filter { $0.seq < limit } } ?? page
            if let first = events.first, first.seq > after + 1 {
                reportMissed(Int(first.seq - after - 1), to: state.durable)
            }
            for event in events {
                if policy.allows(event.name), let listener = state.durable.listener {
                    listener.onEventRecorded(
                        event.name, parameters: Self.parse(event.parametersJSON), timestamp: event.recordedAt)
                }
                state.deliveredThrough = event.seq
            }
            if page.count < Self.catchUpPage || events.count < page.count { break }
        }
        // Everything between the position and `limit` was dropped.
        if let limit, state.deliveredThrough < limit - 1 {
            reportMissed(Int(limit - 1 - state.deliveredThrough), to: state.durable)
            state.deliveredThrough = limit - 1
        }
    }

    /// Tells a listener it missed `count` events, counted from its in-memory
    /// position (exact), and marks the database's count for it reported.
    private func reportMissed(_ count: Int, to durable: EventObservers.Durable) {
        durable.onMissed?(count)
        let consumer = durable.consumerID
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
            let position = state.deliveredThrough
            log.database.async { connection in
                _ = try? connection?.transaction {
                    try connection?.advanceConsumerInTransaction(consumer, to: position)
                    try connection?.markDropsReported(of: consumer)
                }
            }
            durables[id]?.savedThrough = position
        }
    }

    // MARK: - Draining

    /// Returns once everything enqueued so far has been delivered.
    func drain() async {
        await withCheckedContinuation { continuation in
            queue.async { continuation.resume() }
        }
    }

    /// Runs `body` on the delivery queue, in order with deliveries.
    func async(_ body: @escaping @Sendable () -> Void) {
        queue.async(execute: body)
    }
}

// MARK: - Benchmark hook

extension EventEngine {
    /// Pushes `count` synthetic committed events through the delivery queue in
    /// commit-sized groups and returns once all are delivered: the listener
    /// fan-out cost alone, without the commit in front of it. For spool-bench.
    @_spi(Internals) public func deliverSyntheticEvents(
        _ count: Int, name: String, parameters: [String: EventValue], groupSize: Int = 4_096
    ) async {
        let json = (try? EventEncoder.encode(parameters)) ?? "{}"
        var seq: Int64 = 0
        var remaining = count
        while remaining > 0 {
            let group = (0..<min(groupSize, remaining)).map { _ -> CommittedEvent in
                seq += 1
                return CommittedEvent(
                    stored: StoredEvent(
                        seq: seq, id: "", name: name, parametersJSON: json, recordedAt: 0, sessionID: nil,
                        priority: false),
                    parameters: parameters)
            }
            remaining -= group.count
            delivery.enqueue(group)
        }
        await delivery.drain()
    }

    /// Copies the whole WAL into the database file and truncates it, so a
    /// measurement starts from the same state as a baseline.
    @_spi(Internals) public func checkpointForBenchmark() async throws {
        guard let log = state.withLock({ $0.log }) else { return }
        try await log.database.run { try $0.execute("PRAGMA wal_checkpoint(TRUNCATE)") }
    }

    /// Waits until every accepted event is committed and delivered.
    @_spi(Internals) public func waitUntilDelivered() async throws {
        try await settle()
    }
}
