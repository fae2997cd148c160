import Foundation
import SpoolStorage

/// A handle to one `on(_:_:)` subscription.
///
/// Keyed by an internal id, never by the callback, so ``cancel()`` removes
/// exactly this subscription: calling it twice, or after the callback already
/// ran, cannot remove another registration that shares the same callback.
/// Discarding the handle does not cancel: the subscription lasts until
/// `cancel()` or the engine's `close()`.
public final class Registration: Sendable, Hashable {
    private let cancellation: Protected<(@Sendable () -> Void)?>
    /// The internal id this registration is keyed by.
    let id: UInt64

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

    /// Two handles are equal when they are the same object.
    public static func == (lhs: Registration, rhs: Registration) -> Bool { lhs === rhs }
    /// Hashes the object's identity, so handles can be kept in a `Set`.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}
