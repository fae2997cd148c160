/// A weak reference that threads can share: listeners, durable listeners and
/// the background notifier's engines are all held through one.
///
/// `Object` is a class or a class-bound protocol (`any EventListener`); the
/// reference is kept as `AnyObject` because Swift's generics cannot require
/// an existential to be a class.
final class WeakBox<Object>: @unchecked Sendable {
    // Safe: `reference` is assigned once, in init, and Swift's weak loads are
    // thread-safe; `identity` is immutable.
    private weak var reference: AnyObject?
    /// The object's identity, still comparable after it is gone.
    let identity: ObjectIdentifier

    init(_ object: Object) {
        let reference = object as AnyObject
        self.reference = reference
        identity = ObjectIdentifier(reference)
    }

    /// The object, or nil once it was released.
    var object: Object? {
        // Unwrapped first: Swift 6.3's optimizer turns `nil as? Object` on a
        // weak AnyObject into a cast of a null pointer (a crash in release
        // builds, seen in spool-bench).
        guard let reference else { return nil }
        return reference as? Object
    }
}
