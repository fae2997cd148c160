import Foundation

/// A handle to one `on(_:_:)` subscription.
///
/// Keyed by an internal id, never by the callback, so ``cancel()`` removes
/// exactly this subscription: calling it twice, or after the callback already
/// ran, cannot remove another registration that shares the same callback (S4).
/// Discarding the handle does not cancel: the subscription lasts until
/// `cancel()` or the engine's `close()`.
public final class Registration: Sendable, Hashable {
    private let cancellation: Protected<(@Sendable () -> Void)?>
    /// The internal id this registration is keyed by.
    public let id: UInt64

    init(id: UInt64, cancellation: @escaping @Sendable () -> Void) {
        self.id = id
        self.cancellation = Protected(cancellation)
    }

    /// Stops the subscription. Idempotent; safe from inside its own callback.
    public func cancel() {
        // Swap the closure out under the lock, run it outside.
        let action = cancellation.withLock { action in
            defer { action = nil }
            return action
        }
        action?()
    }

    /// True once ``cancel()`` has run.
    public var isCancelled: Bool {
        cancellation.withLock { $0 == nil }
    }

    public static func == (lhs: Registration, rhs: Registration) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}

/// The `on(_:_:)` subscriptions, keyed by id, in registration order.
final class RegistrationRegistry: Sendable {
    typealias Callback = @Sendable (RecordedEvent) -> Void

    struct Entry: Sendable {
        let id: UInt64
        let callback: Callback
    }

    private struct State {
        var nextID: UInt64 = 1
        var byName: [String: [Entry]] = [:]
        var everyEvent: [Entry] = []
        var ready: [Entry] = []
        var readyFired = false
        var readyAt: Double = 0
    }

    private let state = Protected(State())

    /// Adds a subscription. For `.ready` after it fired, the callback runs
    /// at once on the caller's thread, exactly once (S6).
    func add(_ topic: EventTopic, _ callback: @escaping Callback) -> Registration {
        let (id, replay, readyAt) = state.withLock { state -> (UInt64, Bool, Double) in
            let id = state.nextID
            state.nextID += 1
            let entry = Entry(id: id, callback: callback)
            switch topic.kind {
            case .named(let name): state.byName[name, default: []].append(entry)
            case .everyEvent: state.everyEvent.append(entry)
            case .ready:
                if state.readyFired { return (id, true, state.readyAt) }
                state.ready.append(entry)
            }
            return (id, false, 0)
        }
        let registration = Registration(id: id) { [weak self] in self?.remove(id, topic) }
        if replay {
            callback(Self.readyEvent(at: readyAt))
            registration.cancel()  // a replayed ready never fires again
        }
        return registration
    }

    private func remove(_ id: UInt64, _ topic: EventTopic) {
        state.withLock { state in
            switch topic.kind {
            case .named(let name):
                state.byName[name]?.removeAll { $0.id == id }
                if state.byName[name]?.isEmpty == true { state.byName[name] = nil }
            case .everyEvent: state.everyEvent.removeAll { $0.id == id }
            case .ready: state.ready.removeAll { $0.id == id }
            }
        }
    }

    /// The subscriptions for `name`, copied before anyone is called (S5): a
    /// callback that cancels itself or another cannot make a later one miss
    /// this event.
    func snapshot(for name: String) -> (named: [Entry], every: [Entry]) {
        state.withLock { ($0.byName[name] ?? [], $0.everyEvent) }
    }

    var isEmpty: Bool {
        state.withLock { $0.byName.isEmpty && $0.everyEvent.isEmpty }
    }

    /// Fires `.ready` once; later calls do nothing.
    func fireReady() {
        let now = Date().timeIntervalSince1970
        let entries = state.withLock { state -> [Entry] in
            guard !state.readyFired else { return [] }
            state.readyFired = true
            state.readyAt = now
            defer { state.ready.removeAll() }
            return state.ready
        }
        for entry in entries { entry.callback(Self.readyEvent(at: now)) }
    }

    /// Drops every subscription (engine closed).
    func removeAll() {
        state.withLock { state in
            state.byName.removeAll()
            state.everyEvent.removeAll()
            state.ready.removeAll()
        }
    }

    static func readyEvent(at timestamp: Double) -> RecordedEvent {
        RecordedEvent(id: "", seq: 0, name: "ready", parameters: [:], timestamp: timestamp, sessionID: nil)
    }
}
