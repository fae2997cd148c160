import Dispatch
import Foundation
import SpoolStorage

#if canImport(Network)
    import Network
#endif

/// Tells the uploader whether the system has a network path: while it says
/// there is none, automatic uploads wait instead of spending retries (and
/// the battery) on requests that cannot go out, and they start at once when
/// a path returns, without waiting for the backoff.
///
/// On Apple platforms this is `NWPathMonitor`; elsewhere there is none and
/// the retry schedule alone decides. Tests drive ``ManualNetworkPath``.
protocol NetworkPathSource: AnyObject, Sendable {
    /// Starts reporting: `onChange(true)` when a path is usable, `false`
    /// when none is; at least once, soon after starting.
    func start(_ onChange: @escaping @Sendable (Bool) -> Void)
    /// Stops reporting.
    func cancel()
}

#if canImport(Network)
    /// `NWPathMonitor` (iOS 12, macOS 10.14, tvOS 12, watchOS 5: below
    /// Spool's floor) on a queue of its own.
    final class SystemNetworkPath: NetworkPathSource {
        private let monitor = NWPathMonitor()
        private let queue = DispatchQueue(label: "spool.network-path", qos: .utility)

        func start(_ onChange: @escaping @Sendable (Bool) -> Void) {
            monitor.pathUpdateHandler = { path in onChange(path.status == .satisfied) }
            monitor.start(queue: queue)
        }

        func cancel() {
            monitor.cancel()
        }
    }
#endif

/// A network path set by hand: what tests use to drive "offline, then
/// online".
final class ManualNetworkPath: NetworkPathSource {
    private let state = Protected<(available: Bool, onChange: (@Sendable (Bool) -> Void)?)>((true, nil))

    init(available: Bool = true) {
        state.withLock { $0.available = available }
    }

    func start(_ onChange: @escaping @Sendable (Bool) -> Void) {
        let available = state.withLock { state in
            state.onChange = onChange
            return state.available
        }
        onChange(available)
    }

    func cancel() {
        state.withLock { $0.onChange = nil }
    }

    /// Reports `available` to whoever started this source.
    func set(available: Bool) {
        let onChange = state.withLock { state in
            state.available = available
            return state.onChange
        }
        onChange?(available)
    }
}
