import Foundation
import SpoolStorage

// MARK: - Positions and delivery (on the delivery queue)

extension DurableListeners {
    /// An attached listener and how far it got.
    struct Position {
        let durable: Durable
        var deliveredThrough: Int64
        var savedThrough: Int64
    }

    /// How many stored events one catch-up read fetches.
    static let catchUpPage = 256

    /// Starts delivering to `durable` from `position`: first the stored
    /// events after it up to `head` (the log's head when the position was
    /// read), then live ones. `missed` is what the retention bound dropped
    /// while it was away.
    ///
    /// Called from the database queue, so every commit after `head` reaches
    /// the delivery queue after this.
    ///
    /// Added again in this engine (while attached, or after it was removed),
    /// it goes on after what it was given here, which its saved `position`
    /// may trail.
    func startDelivering(_ durable: Durable, at position: Int64, head: Int64, missed: Int) {
        queue.async {
            if missed > 0 { durable.onMissed?(missed) }
            let given = max(
                self.positions[durable.id]?.deliveredThrough ?? .min,
                self.detachedThrough.removeValue(forKey: durable.id) ?? .min)
            var state = Position(durable: durable, deliveredThrough: max(position, given), savedThrough: position)
            self.catchUp(&state, before: head + 1, policy: self.policy())
            self.positions[durable.id] = state
            self.savePositions()
        }
    }

    /// Delivers to every attached listener the stored events up to `head`
    /// it has not been given: those other processes committed.
    func catchUp(to head: Int64) {
        queue.async {
            let policy = self.policy()
            for id in self.positions.keys {
                guard var state = self.positions[id], state.deliveredThrough < head else { continue }
                self.catchUp(&state, before: head + 1, policy: policy)
                self.positions[id] = state
            }
            self.savePositions()
        }
    }

    /// Whether `seq` was erased (``erased(through:)``) by this engine.
    func isErased(_ seq: Int64) -> Bool {
        erasedThrough.withLock { seq <= $0 }
    }

    /// Whether no listener is attached here (on the delivery queue).
    var noneAttached: Bool {
        dispatchPrecondition(condition: .onQueue(queue))
        return positions.isEmpty
    }

    /// Delivers one committed event to every attached listener, catching up
    /// first from the database if it has a gap. `parameters` are the
    /// delivered parameters, nil when the policy does not let this event
    /// through (the position still advances).
    func deliver(_ stored: StoredEvent, parameters: [String: EventValue]?, policy: DeliveryQueue.DeliveryPolicy) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !positions.isEmpty else { return }
        for id in positions.keys {
            guard var state = positions[id], state.durable.listener.object != nil else { continue }
            guard stored.seq > state.deliveredThrough else { continue }
            if stored.seq > state.deliveredThrough + 1 {
                catchUp(&state, before: stored.seq, policy: policy)
            }
            if let parameters, let listener = state.durable.listener.object {
                listener.onEventRecorded(RecordedEvent(stored, parameters: parameters))
            }
            state.deliveredThrough = stored.seq
            positions[id] = state
        }
    }

    /// Delivers stored events after the listener's position (and before
    /// `limit`, when given), telling it about any that the retention bound
    /// removed first.
    private func catchUp(_ state: inout Position, before limit: Int64?, policy: DeliveryQueue.DeliveryPolicy) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let log else { return }
        while true {
            let after = state.deliveredThrough
            let page: [StoredEvent]
            do {
                page = try log.database.sync {
                    try $0.readEvents(after: after, limit: Self.catchUpPage, now: log.database.clock.now)
                }
            } catch {
                // The position stays: the next event (or attach) tries again.
                diagnostics.report(
                    .durableListenerStalled, error: error,
                    "durable listener \(state.durable.id) could not read the events after \(after)")
                return
            }
            let events = limit.map { limit in page.filter { $0.seq < limit } } ?? page
            if let first = events.first, first.seq > after + 1 {
                reportMissed(Int(clamping: first.seq - after - 1), to: state.durable, log: log)
            }
            for event in events {
                // A dead letter put back for the uploader was delivered when
                // it was recorded.
                if !event.uploaderOnly, policy.allows(event.name), !isErased(event.seq),
                    let listener = state.durable.listener.object
                {
                    listener.onEventRecorded(
                        RecordedEvent(event, parameters: EventValue.parameters(fromJSON: event.parametersJSON)))
                }
                state.deliveredThrough = event.seq
            }
            if page.count < Self.catchUpPage || events.count < page.count { break }
        }
        // Everything between the position and `limit` was dropped.
        if let limit, state.deliveredThrough < limit - 1 {
            reportMissed(Int(clamping: limit - 1 - state.deliveredThrough), to: state.durable, log: log)
            state.deliveredThrough = limit - 1
        }
    }

    /// Tells a listener it missed `count` events, counted from its in-memory
    /// position (exact), and marks the database's count for it reported.
    private func reportMissed(_ count: Int, to durable: Durable, log: EventLog) {
        durable.onMissed?(count)
        let consumer = durable.consumerID
        // try?: if marking fails, the listener may be told of these drops once
        // more at its next attach; no event is lost or held back by it.
        log.database.async { connection in try? connection?.markDropsReported(of: consumer) }
    }

    /// Writes advanced positions (and deletes the prefix every consumer
    /// finished), off the delivery queue.
    ///
    /// An attached listener hears every committed event from this queue, even
    /// ones the retention bound has already deleted from the log, so drops
    /// counted against its (lagging) saved position are not real: they are
    /// marked reported with the save. Real drops happen only while it is away
    /// (told at the next attach) or show up as gaps in a catch-up (told then).
    func savePositions() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let log else { return }
        for (id, state) in positions where state.deliveredThrough > state.savedThrough {
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
            positions[id]?.savedThrough = position
        }
    }

    /// Every event up to `head` was erased: attached listeners stand there
    /// now (the database already moved their positions), so the gap is no
    /// drop. From the call on, no listener is given an event up to `head`,
    /// not even one already on its way to the delivery queue or read by a
    /// catch-up before the erasure.
    func erased(through head: Int64) {
        erasedThrough.withLock { $0 = max($0, head) }
        queue.async {
            for (id, var state) in self.positions {
                state.deliveredThrough = max(state.deliveredThrough, head)
                state.savedThrough = max(state.savedThrough, head)
                self.positions[id] = state
            }
        }
    }
}
