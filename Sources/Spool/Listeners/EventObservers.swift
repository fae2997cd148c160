import Foundation
import SpoolStorage

/// The listener registry an engine exposes as ``EventEngine/events``.
///
/// Listeners may be added before `start()`: they stay registered and receive
/// events once a session starts.
public final class EventObservers: Sendable {
    private let listeners = Protected<[WeakBox<any EventListener>]>([])
    /// Durable listeners: what was added, their leases and positions.
    let durables: DurableListeners
    /// `on(_:_:)` registrations and streams.
    let registrations = SubscriptionRegistry<EventTopic, RecordedEvent>()

    init(durables: DurableListeners) {
        self.durables = durables
    }

    // MARK: - Plain observers

    /// Adds `listener`, held weakly. Adding the same object twice keeps one
    /// registration, so it is called once per event.
    public func addObserver(_ listener: any EventListener) {
        let identity = ObjectIdentifier(listener)
        listeners.withLock { listeners in
            listeners.removeAll { $0.object == nil }
            guard !listeners.contains(where: { $0.identity == identity }) else { return }
            listeners.append(WeakBox(listener))
        }
    }

    /// Removes only `listener`; every other listener keeps receiving.
    public func removeObserver(_ listener: any EventListener) {
        let identity = ObjectIdentifier(listener)
        listeners.withLock { listeners in
            listeners.removeAll { $0.identity == identity || $0.object == nil }
        }
    }

    /// True when no plain listener is registered.
    var isEmpty: Bool { listeners.withLock { $0.isEmpty } }

    /// The listeners at this moment (the delivery loop iterates a copy).
    func snapshot() -> [WeakBox<any EventListener>] {
        listeners.withLock { $0 }
    }

    // MARK: - Durable observers

    /// Adds a listener that never misses an event across crashes and restarts.
    ///
    /// Spool keeps a position for `id` in the database, advanced as the
    /// listener returns from each event and saved once per commit group.
    /// After a restart, add the listener again under the same id: it first
    /// receives every event it had not finished (at least once — the events
    /// since the last save come again after a crash), then new ones. Added
    /// again in the same engine, it goes on where it was. Events are kept
    /// until every durable listener and the uploader have passed them, up to
    /// the engine's `maximumRetainedEvents`. While added, the listener hears
    /// every event as it is committed, however slow it is; while it is away
    /// (not added, or released), the log keeps only that many for it, and on
    /// its return `onMissed` is told how many gave way.
    ///
    /// The listener is held weakly, like ``addObserver(_:)``; while it is gone
    /// its position stays put.
    ///
    /// When several processes share the database (an app and its
    /// extensions), an id belongs to one process at a time: the one that
    /// added it first delivers every event in the log to it, whichever
    /// process recorded the event. Another process adding the same id
    /// delivers nothing to it and reports a
    /// ``SpoolDiagnostic/Kind/durableListenerHeldElsewhere`` diagnostic, until
    /// the holder removes it, closes or dies; then it takes over from the
    /// saved position.
    ///
    /// - Parameters:
    ///   - listener: the object to call, on the delivery queue.
    ///   - id: a stable name, unique among durable listeners (`crm`, `warehouse`).
    ///   - onMissed: called on the delivery queue with the number of events
    ///     that were dropped before the listener could see them.
    public func addDurableObserver(
        _ listener: any EventListener, id: String, onMissed: (@Sendable (Int) -> Void)? = nil
    ) {
        durables.add(DurableListeners.Durable(id: id, listener: listener, onMissed: onMissed))
    }

    /// Stops delivering to the durable listener `id`. With `forget`, its
    /// position is deleted too, so it no longer holds events back; without,
    /// it keeps its place and catches up when added again.
    public func removeDurableObserver(id: String, forget: Bool = false) {
        durables.remove(id, forget: forget)
    }

    // MARK: - Swift concurrency

    /// Every delivered event matching `topic`, as an `AsyncSequence`, with the
    /// same order and gates as listeners. The stream ends when the engine
    /// closes or the consuming task is cancelled.
    ///
    /// Events are buffered for the consuming task as they are delivered;
    /// with the default `.unbounded` policy a consumer that falls behind
    /// holds every event it has not read in memory. Pass
    /// `.bufferingNewest(n)` to bound it. Streaming `.ready` yields one value
    /// and ends.
    ///
    /// ```swift
    /// for await event in engine.events.stream("purchase") {
    ///     print(event.name, event.parameters)
    /// }
    /// ```
    public func stream(
        _ topic: EventTopic = .everyEvent,
        bufferingPolicy: AsyncStream<RecordedEvent>.Continuation.BufferingPolicy = .unbounded
    ) -> AsyncStream<RecordedEvent> {
        registrations.stream(topic, bufferingPolicy: bufferingPolicy)
    }

    /// Ends every stream and drops every registration (engine closed).
    func finishAll() {
        registrations.finishAll()
    }
}
