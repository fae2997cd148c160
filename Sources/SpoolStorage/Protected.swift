import Foundation

/// A value behind a lock: the one lock type Spool's shared mutable state uses.
///
/// Call user code outside `withLock`; the closure should only read or swap
/// state. A thread may also wait, with the lock released, until the value
/// satisfies a condition (``wait(until:for:)``); whoever changes it so calls
/// ``broadcast()``.
package final class Protected<Value>: @unchecked Sendable {
    // Safe: `value` is only read or written while `condition`'s lock is held.
    private let condition = NSCondition()
    private var value: Value

    package init(_ value: Value) {
        self.value = value
    }

    @inline(__always) @discardableResult
    package func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        condition.lock()
        defer { condition.unlock() }
        return try body(&value)
    }

    /// Blocks until `isSatisfied` holds for the value or `deadline` passes,
    /// with the lock released while it waits.
    ///
    /// - Returns: whether it holds.
    package func wait(until deadline: Date, for isSatisfied: (Value) -> Bool) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while !isSatisfied(value) {
            guard condition.wait(until: deadline) else { return isSatisfied(value) }
        }
        return true
    }

    /// Wakes every thread in ``wait(until:for:)`` to check its condition.
    package func broadcast() {
        condition.broadcast()
    }
}
