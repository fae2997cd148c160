import Foundation

/// The listener registry an engine exposes as ``EventEngine/events``.
///
/// Listeners may be added before `start()`: they stay registered and receive
/// events once a session starts (L1).
public final class EventObservers: Sendable {
    final class WeakListener: Sendable {
        weak let listener: (any EventListener)?
        let identity: ObjectIdentifier

        init(_ listener: any EventListener) {
            self.listener = listener
            identity = ObjectIdentifier(listener)
        }
    }

    /// A listener with its own position in the log (a consumer row named
    /// `listener:<id>`), so it resumes after a crash or restart.
    final class Durable: Sendable {
        let id: String
        weak let listener: (any EventListener)?
        let onMissed: (@Sendable (Int) -> Void)?

        init(id: String, listener: any EventListener, onMissed: (@Sendable (Int) -> Void)?) {
            self.id = id
            self.listener = listener
            self.onMissed = onMissed
        }

        var consumerID: String { Self.consumerID(for: id) }

        static func consumerID(for id: String) -> String { "listener:" + id }
    }

    private let listeners = Protected<[WeakListener]>([])
    let registrations = RegistrationRegistry()
    /// Set by the engine: called when a durable listener is added.
    let durableAdded = Protected<(@Sendable (Durable) -> Void)?>(nil)
    let durableRemoved = Protected<(@Sendable (String, Bool) -> Void)?>(nil)
    private let durables = Protected<[String: Durable]>([:])

    init() {}

    // MARK: - Plain observers

    /// Adds `listener`, held weakly. Adding the same object twice keeps one
    /// registration (L9), so it is called once per event.
    public func addObserver(_ listener: any EventListener) {
        let identity = ObjectIdentifier(listener)
        listeners.withLock { listeners in
            listeners.removeAll { $0.listener == nil }
            guard !listeners.contains(where: { $0.identity == identity && $0.listener != nil }) else { return }
            listeners.append(WeakListener(listener))
        }
    }

    /// Removes only `listener`; every other listener keeps receiving (L11).
    public func removeObserver(_ listener: any EventListener) {
        let identity = ObjectIdentifier(listener)
        listeners.withLock { listeners in
            listeners.removeAll { $0.identity == identity || $0.listener == nil }
        }
    }

    /// The listeners at this moment (the delivery loop iterates a copy).
    func snapshot() -> [WeakListener] {
        listeners.withLock { $0 }
    }

    // MARK: - Durable observers

    /// Adds a listener that never misses an event across crashes and restarts.
    ///
    /// Spool keeps a position for `id` in the database and advances it as the
    /// listener returns from each event. After a restart, add the listener
    /// again under the same id: it first receives every event it had not
    /// finished (at least once — an event it was handling when the app died
    /// comes again), then new ones. Events are kept until every durable
    /// listener and the uploader have passed them, up to the engine's
    /// `maximumRetainedEvents`. While added, the listener hears every event
    /// as it is committed, however slow it is; while it is away (not added,
    /// or released), the log keeps only that many for it, and on its return
    /// `onMissed` is told how many gave way.
    ///
    /// The listener is held weakly, like ``addObserver(_:)``; while it is gone
    /// its position stays put.
    ///
    /// - Parameters:
    ///   - id: a stable name, unique among durable listeners (`crm`, `warehouse`).
    ///   - onMissed: called on the delivery queue with the number of events
    ///     that were dropped before the listener could see them.
    public func addDurableObserver(
        _ listener: any EventListener, id: String, onMissed: (@Sendable (Int) -> Void)? = nil
    ) {
        let durable = Durable(id: id, listener: listener, onMissed: onMissed)
        durables.withLock { $0[id] = durable }
        durableAdded.withLock { $0 }?(durable)
    }

    /// Stops delivering to the durable listener `id`. With `forget`, its
    /// position is deleted too, so it no longer holds events back; without,
    /// it keeps its place and catches up when added again.
    public func removeDurableObserver(id: String, forget: Bool = false) {
        durables.withLock { $0[id] = nil }
        durableRemoved.withLock { $0 }?(id, forget)
    }

    func durableSnapshot() -> [Durable] {
        durables.withLock { Array($0.values) }
    }

    // MARK: - Swift concurrency

    /// Every delivered event matching `topic`, as an `AsyncSequence`, with the
    /// same order and gates as listeners. The stream ends when the engine
    /// closes or the consuming task is cancelled.
    public func stream(
        _ topic: EventTopic = .everyEvent,
        bufferingPolicy: AsyncStream<RecordedEvent>.Continuation.BufferingPolicy = .unbounded
    ) -> AsyncStream<RecordedEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: RecordedEvent.self, bufferingPolicy: bufferingPolicy)
        let registration = registrations.add(topic) { event in continuation.yield(event) }
        streamEnds.withLock { $0[registration.id] = continuation }
        continuation.onTermination = { [weak self] _ in
            registration.cancel()
            _ = self?.streamEnds.withLock { $0.removeValue(forKey: registration.id) }
        }
        return stream
    }

    private let streamEnds = Protected<[UInt64: AsyncStream<RecordedEvent>.Continuation]>([:])

    /// Ends every stream and drops every registration (engine closed).
    func finishAll() {
        let continuations = streamEnds.withLock { ends in
            defer { ends.removeAll() }
            return Array(ends.values)
        }
        for continuation in continuations { continuation.finish() }
        registrations.removeAll()
    }
}
