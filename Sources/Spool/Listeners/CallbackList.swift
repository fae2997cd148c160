/// Callbacks keyed by an internal id, called in registration order from a
/// snapshot (a callback that cancels itself or another cannot make a later
/// one miss the value being sent), with an `AsyncStream` front.
final class CallbackList<Value: Sendable>: Sendable {
    typealias Callback = @Sendable (Value) -> Void

    private struct State {
        var nextID: UInt64 = 1
        var entries: [(id: UInt64, callback: Callback)] = []
        var streams: [UInt64: AsyncStream<Value>.Continuation] = [:]
    }

    private let state = Protected(State())

    func add(_ callback: @escaping Callback) -> Registration {
        let id = state.withLock { state in
            defer { state.nextID += 1 }
            state.entries.append((state.nextID, callback))
            return state.nextID
        }
        return Registration(id: id) { [weak self] in
            self?.state.withLock { state in
                state.entries.removeAll { $0.id == id }
                state.streams[id] = nil
            }
        }
    }

    func stream() -> AsyncStream<Value> {
        let (stream, continuation) = AsyncStream.makeStream(of: Value.self)
        let registration = add { continuation.yield($0) }
        state.withLock { $0.streams[registration.id] = continuation }
        continuation.onTermination = { _ in registration.cancel() }
        return stream
    }

    var isEmpty: Bool { state.withLock { $0.entries.isEmpty } }

    func send(_ value: Value) {
        for entry in state.withLock({ $0.entries }) { entry.callback(value) }
    }

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
