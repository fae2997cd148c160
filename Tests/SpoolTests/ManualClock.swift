import Foundation

@testable import SpoolStorage

/// A clock the test moves: `now` and `monotonic` change only in
/// ``advance(by:)`` (and `now` alone in ``setWall(to:)``), and the timers it
/// passes then run, in order, on their queues.
final class ManualClock: SpoolClock {
    private struct Timer {
        let at: Double
        let queue: DispatchQueue
        let body: @Sendable () -> Void
    }

    private let state = Protected((now: 1_700_000_000.0, timers: [Timer](), ran: 0, wallOffset: 0.0))

    /// Starting at `now` (seconds since 1970).
    init(now: Double = 1_700_000_000) {
        state.withLock { $0.now = now }
    }

    var now: Double { state.withLock { $0.now + $0.wallOffset } }

    /// Timers' time less the wall clock's jumps: it moves only in ``advance(by:)``.
    var monotonic: Double? { state.withLock { $0.now - 1_600_000_000 } }

    /// Sets the wall clock (`now`) to `wall` without moving time: the user
    /// changed the device's clock. Timers and `monotonic` do not move.
    func setWall(to wall: Double) {
        state.withLock { $0.wallOffset = wall - $0.now }
    }

    /// How many timers have run so far.
    var timersRun: Int { state.withLock { $0.ran } }

    /// How many timers wait to fire exactly `seconds` from now.
    func timersPending(dueIn seconds: Double) -> Int {
        state.withLock { state in state.timers.count { $0.at == state.now + seconds } }
    }

    func schedule(after delay: TimeInterval, on queue: DispatchQueue, _ body: @escaping @Sendable () -> Void) {
        state.withLock { $0.timers.append(Timer(at: $0.now + max(0, delay), queue: queue, body: body)) }
    }

    /// Moves time on by `seconds` and starts every timer now due.
    func advance(by seconds: Double) {
        let due = state.withLock { state -> [Timer] in
            state.now += seconds
            let now = state.now
            defer { state.timers.removeAll { $0.at <= now } }
            return state.timers.filter { $0.at <= now }.sorted { $0.at < $1.at }
        }
        for timer in due {
            timer.queue.async { [state] in
                timer.body()
                state.withLock { $0.ran += 1 }
            }
        }
    }
}
