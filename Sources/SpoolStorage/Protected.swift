import Foundation

/// A value behind a lock: the one lock type Spool's shared mutable state uses.
///
/// Call user code outside `withLock`; the closure should only read or swap
/// state.
package final class Protected<Value>: @unchecked Sendable {
    // Safe: `value` is only read or written while `lock` is held.
    private let lock = NSLock()
    private var value: Value

    package init(_ value: Value) {
        self.value = value
    }

    @inline(__always) @discardableResult
    package func withLock<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
