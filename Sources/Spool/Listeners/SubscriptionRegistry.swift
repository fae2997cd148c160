import SpoolStorage

/// Callbacks grouped by topic and keyed by an internal id: the one registry
/// behind `on(_:_:)`, the event streams and survey triggers.
///
/// Callbacks run in registration order from a snapshot taken before the
/// first one is called, so a callback that cancels itself or another cannot
/// make a later one miss the value being sent. A topic can be *latched*: it
/// fires once, and a later subscriber gets the value at once instead of
/// waiting (the engine's `.ready`). Every callback runs outside the lock.
final class SubscriptionRegistry<Topic: Hashable & Sendable, Value: Sendable>: Sendable {
    typealias Callback = @Sendable (Value) -> Void

    struct Entry: Sendable {
        let id: UInt64
        let callback: Callback
    }

    private struct State {
        var nextID: UInt64 = 1
        var entries: [Topic: [Entry]] = [:]
        var streams: [UInt64: AsyncStream<Value>.Continuation] = [:]
        var latched: [Topic: Value] = [:]
    }

    private let state = Protected(State())

    init() {}

    /// Calls `callback` for every value sent to `topic` until the returned
    /// registration is cancelled. On a latched topic it runs at once, on the
    /// caller's thread, exactly once.
    func add(_ topic: Topic, _ callback: @escaping Callback) -> Registration {
        let (id, latched) = state.withLock { state -> (UInt64, Value?) in
            defer { state.nextID += 1 }
            if let value = state.latched[topic] { return (state.nextID, value) }
            state.entries[topic, default: []].append(Entry(id: state.nextID, callback: callback))
            return (state.nextID, nil)
        }
        let registration = Registration(id: id) { [weak self] in self?.remove(id, from: topic) }
        if let latched {
            callback(latched)
            registration.cancel()
        }
        return registration
    }

    /// The values sent to `topic`, as an `AsyncSequence` that ends when the
    /// consuming task is cancelled or ``finishAll()`` runs.
    func stream(
        _ topic: Topic, bufferingPolicy: AsyncStream<Value>.Continuation.BufferingPolicy = .unbounded
    ) -> AsyncStream<Value> {
        let (stream, continuation) = AsyncStream.makeStream(of: Value.self, bufferingPolicy: bufferingPolicy)
        let registration = add(topic) { continuation.yield($0) }
        if registration.isCancelled {
            continuation.finish()  // a latched topic: its one value is already in the stream
            return stream
        }
        state.withLock { $0.streams[registration.id] = continuation }
        continuation.onTermination = { _ in registration.cancel() }
        return stream
    }

    private func remove(_ id: UInt64, from topic: Topic) {
        state.withLock { state in
            state.entries[topic]?.removeAll { $0.id == id }
            if state.entries[topic]?.isEmpty == true { state.entries[topic] = nil }
            state.streams[id] = nil
        }
    }

    /// The callbacks for `first`, then those for `second`, copied under one
    /// lock before anyone is called.
    func snapshot(_ first: Topic, _ second: Topic? = nil) -> [Entry] {
        state.withLock { state in
            let entries = state.entries[first] ?? []
            guard let second, let more = state.entries[second] else { return entries }
            return entries + more
        }
    }

    /// True when no callback waits on any topic.
    var isEmpty: Bool { state.withLock { $0.entries.isEmpty } }

    /// Calls every callback of `topic` with `value`, from a snapshot.
    func send(_ value: Value, to topic: Topic) {
        for entry in snapshot(topic) { entry.callback(value) }
    }

    /// Sends `value` to `topic` once and remembers it for later subscribers;
    /// later calls do nothing.
    func latch(_ topic: Topic, _ value: Value) {
        let entries = state.withLock { state -> [Entry] in
            guard state.latched[topic] == nil else { return [] }
            state.latched[topic] = value
            return state.entries.removeValue(forKey: topic) ?? []
        }
        for entry in entries { entry.callback(value) }
    }

    /// Ends every stream and drops every callback (the engine closed).
    func finishAll() {
        let streams = state.withLock { state in
            defer {
                state.streams.removeAll()
                state.entries.removeAll()
            }
            return Array(state.streams.values)
        }
        for continuation in streams { continuation.finish() }
    }
}
