import SpoolStorage

extension EventEngine {
    /// Gives every durable listener its consumer row and starts its catch-up,
    /// and wires later `addDurableObserver` calls to do the same.
    func attachDurableListeners(_ log: EventLog) async throws {
        let delivery = self.delivery
        let added: @Sendable (EventObservers.Durable) -> Void = { durable in
            log.database.async { connection in
                guard let connection,
                    let position = try? connection.registerConsumer(durable.consumerID, startingAt: .end)
                else { return }
                let missed = (try? connection.takeUnreportedDrops(of: durable.consumerID)) ?? 0
                let head = (try? connection.headPosition()) ?? position
                delivery.attach(durable, at: position, head: head, missed: missed)
            }
        }
        let removed: @Sendable (String, Bool) -> Void = { id, forget in
            // Through the database queue, so it lands after an attach that
            // an earlier addDurableObserver queued there.
            log.database.async { connection in
                delivery.detach(id)
                guard forget else { return }
                try? connection?.removeConsumer(EventObservers.Durable.consumerID(for: id))
            }
        }
        events.durableHooks.withLock { $0 = EventObservers.DurableHooks(added: added, removed: removed) }
        for durable in events.durableSnapshot() {
            let consumer = durable.consumerID
            try await log.database.run { connection in
                let position = try connection.registerConsumer(consumer, startingAt: .end)
                let missed = try connection.takeUnreportedDrops(of: consumer)
                delivery.attach(durable, at: position, head: try connection.headPosition(), missed: missed)
            }
        }
        // Let the catch-ups finish and their positions reach the database
        // queue before start-up appends anything, so the retention bound
        // counts drops from where each listener really is.
        await delivery.drain()
    }
}
