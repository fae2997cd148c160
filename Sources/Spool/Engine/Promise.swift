import SpoolStorage

/// A value that arrives once, from any thread, for any number of awaiting
/// tasks: what became of an event waiting for a session, the position a
/// consent withdrawal discards through.
final class Promise<Value: Sendable>: Sendable {
    private let state = Protected<(value: Value?, waiting: [CheckedContinuation<Value, Never>])>((nil, []))

    init() {}

    /// Sets the value (the first one wins) and resumes every waiter.
    @Sendable func fulfill(_ value: Value) {
        let waiting = state.withLock { state -> [CheckedContinuation<Value, Never>] in
            guard state.value == nil else { return [] }
            state.value = value
            defer { state.waiting.removeAll() }
            return state.waiting
        }
        for continuation in waiting { continuation.resume(returning: value) }
    }

    /// The value if it has arrived, without waiting for it.
    var arrived: Value? {
        state.withLock { $0.value }
    }

    /// The value, once fulfilled.
    var value: Value {
        get async { await value() }
    }

    /// The value, once fulfilled, awaited on the caller's actor: no hop to
    /// another thread and back while it waits (an actor on the database
    /// queue stays there).
    func value(isolation: isolated (any Actor)? = #isolation) async -> Value {
        await withCheckedContinuation(isolation: isolation) { continuation in
            let ready = state.withLock { state -> Value? in
                if state.value == nil { state.waiting.append(continuation) }
                return state.value
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
