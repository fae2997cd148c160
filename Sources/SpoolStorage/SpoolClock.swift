import Dispatch
import Foundation

/// Spool's one source of time: the wall-clock seconds it stamps and compares
/// (events, sessions, leases, the history window) and the delays its timers
/// wait. ``SystemClock`` is the real one; a test passes a clock it advances
/// itself, so behaviour about time runs without sleeping.
package protocol SpoolClock: Sendable {
    /// Seconds since 1970.
    var now: Double { get }
    /// Runs `body` on `queue` once `delay` seconds of this clock have passed.
    func schedule(after delay: TimeInterval, on queue: DispatchQueue, _ body: @escaping @Sendable () -> Void)
}

/// The system's wall clock, with dispatch's timers.
package struct SystemClock: SpoolClock {
    package init() {}

    package var now: Double { Date().timeIntervalSince1970 }

    /// A delay below zero or NaN runs `body` at once; one over a year (an
    /// infinite `Retry-After`, a huge interval) waits a year.
    package func schedule(after delay: TimeInterval, on queue: DispatchQueue, _ body: @escaping @Sendable () -> Void) {
        queue.asyncAfter(deadline: .now() + Self.clamped(delay), execute: body)
    }

    /// `delay` within 0 and a year.
    package static func clamped(_ delay: TimeInterval) -> TimeInterval {
        delay.isNaN ? 0 : min(max(0, delay), 365 * 86_400)
    }
}
