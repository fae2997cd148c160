extension EventEngine {
    /// Gives every durable listener its consumer row and starts its catch-up,
    /// and wires later `addDurableObserver` calls to do the same.
    func attachDurableListeners(_ log: EventLog) async throws {
        let delivery = self.delivery
        events.durableAdded.withLock { hook in
            hook = { durable in
                log.database.async { connection in
                    guard let connection,
                        let position = try? connection.registerConsumer(durable.consumerID, startingAt: .end)
                    else { return }
                    delivery.attach(durable, at: position)
                }
            }
        }
        events.durableRemoved.withLock { hook in
            hook = { id, forget in
                delivery.detach(id)
                guard forget else { return }
                log.database.async { connection in
                    try? connection?.removeConsumer(EventObservers.Durable.consumerID(for: id))
                }
            }
        }
        for durable in events.durableSnapshot() {
            let position = try await log.registerConsumer(durable.consumerID, startingAt: .end)
            delivery.attach(durable, at: position)
        }
    }
}
