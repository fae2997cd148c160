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
    func follow(_ events: [StoredEvent], triggering surveys: [[SurveyMatch]]?, allowing allows: (String) -> Bool)
}

/// The one internal serial queue every listener, registration and stream is
/// called on, in log order, after the event's commit; survey triggers and
/// the diagnostics handler and streams run on it too.
///
/// Events reach it from the event log's commit handler in commit groups. A
/// listener that records an event from inside its callback only appends to
/// the log; that event comes back through here later, so delivery never
/// recurses.
package final class DeliveryQueue: Sendable {
    private let queue: DispatchQueue
    private let observers: EventObservers
    private let durables: DurableListeners
    private let policy: @Sendable () -> DeliveryPolicy
    /// What follows listeners after each group (surveys), while the engine
    /// has a database.
    private let follower = Protected<(any DeliveryFollower)?>(nil)

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

    /// - Parameter queue: a serial queue of its own; diagnostics are reported
    ///   on it too, in order with deliveries.
    init(
        queue: DispatchQueue, observers: EventObservers, durables: DurableListeners,
        policy: @escaping @Sendable () -> DeliveryPolicy
    ) {
        self.queue = queue
        self.observers = observers
        self.durables = durables
        self.policy = policy
    }

    /// Runs `follower` after each group (nil: none).
    func setFollower(_ follower: (any DeliveryFollower)?) {
        self.follower.withLock { $0 = follower }
    }

    /// Whether committed events would reach anyone: a listener, a
    /// registration or stream, a durable listener, or an active follower
    /// (surveys). When not, the writer need not even build them.
    var isListening: Bool {
        durables.anyHeld || follower.withLock({ $0 })?.isActive == true || !observers.isEmpty
            || !observers.registrations.isEmpty
    }

    // MARK: - Live delivery

    /// Delivers committed events (called on the database queue), and then
    /// the survey triggers found for them in their transaction.
    package func enqueue(_ events: [StoredEvent], triggered: [[SurveyMatch]]? = nil) {
        queue.async { self.deliver(events, triggered) }
    }

    private func deliver(_ events: [StoredEvent], _ triggered: [[SurveyMatch]]?) {
        dispatchPrecondition(condition: .onQueue(queue))
        let policy = self.policy()
        let hasObservers = !observers.isEmpty || !observers.registrations.isEmpty
        let follower = self.follower.withLock { $0 }.flatMap { $0.isActive ? $0 : nil }
        guard hasObservers || follower != nil || !durables.noneAttached else { return }
        for event in events {
            // An erasure that returned since these were committed erased them.
            let allowed = policy.allows(event.name) && !durables.isErased(event.seq)
            let listeners = allowed && hasObservers ? observers.snapshot() : []
            let entries =
                allowed && hasObservers ? observers.registrations.snapshot(.named(event.name), .everyEvent) : []
            // Parsed from the stored JSON once per event, and only when
            // someone gets it (a registration for another name does not).
            let parameters =
                allowed && (!listeners.isEmpty || !entries.isEmpty || !durables.noneAttached)
                ? event.deliveredParameters : nil
            if let parameters { deliverToObservers(event, parameters, listeners, entries) }
            durables.deliver(event, parameters: parameters, policy: policy)
        }
        follower?.follow(events, triggering: triggered, allowing: policy.allows)
        durables.savePositions()
    }

    private func deliverToObservers(
        _ stored: StoredEvent, _ parameters: [String: EventValue], _ listeners: [WeakBox<any EventListener>],
        _ entries: [SubscriptionRegistry<EventTopic, RecordedEvent>.Entry]
    ) {
        let recorded = RecordedEvent(stored, parameters: parameters)
        for listener in listeners { listener.object?.onEventRecorded(recorded) }
        for entry in entries { entry.callback(recorded) }
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
    /// JSON (dates are already strings there), once per event for every
    /// listener, on the delivery queue: the write buffer holds only each
    /// event's encoded JSON, never its parameters dictionary.
    var deliveredParameters: [String: EventValue] {
        EventValue.parameters(fromJSON: parametersJSON)
    }
}
