import Dispatch
import Foundation

/// Spool's one source of time: the wall-clock seconds it stamps and compares
/// (events, sessions, leases, the history window), the monotonic seconds an
/// event's age is measured in, and the delays its timers wait.
/// ``SystemClock`` is the real one; a test passes a clock it advances
/// itself, so behaviour about time runs without sleeping.
package protocol SpoolClock: Sendable {
    /// Seconds since 1970.
    var now: Double { get }
    /// Seconds on a clock that only moves forward and keeps counting while
    /// the device sleeps, from an origin of its own: the difference of two
    /// readings of one clock is the time between them, whatever the wall
    /// clock did meanwhile. Nil when this clock has none.
    var monotonic: Double? { get }
    /// Runs `body` on `queue` once `delay` seconds of this clock have passed.
    func schedule(after delay: TimeInterval, on queue: DispatchQueue, _ body: @escaping @Sendable () -> Void)
}

/// The system's wall clock, with dispatch's timers, and the monotonic clock
/// the platform layer passes (the storage layer reads none itself).
package struct SystemClock: SpoolClock {
    private let readMonotonic: (@Sendable () -> Double)?

    /// - Parameter monotonic: reads the system's monotonic clock (see
    ///   ``SpoolClock/monotonic``); nil: this clock has none.
    package init(monotonic: (@Sendable () -> Double)? = nil) {
        readMonotonic = monotonic
    }

    package var now: Double { Date().timeIntervalSince1970 }

    package var monotonic: Double? { readMonotonic?() }

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

extension SpoolClock {
    /// Suspends the calling task until `delay` seconds of this clock have
    /// passed. Not cancellable: it returns when the time is up.
    package func sleep(seconds delay: TimeInterval) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            schedule(after: delay, on: sleepQueue) { continuation.resume() }
        }
    }
}

/// Where ``SpoolClock/sleep(seconds:)`` resumes its waiters.
private let sleepQueue = DispatchQueue(label: "spool.clock", qos: .utility)
