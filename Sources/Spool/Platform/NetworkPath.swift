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
    /// Starts reporting the path: at least once, soon after starting, and
    /// on every change.
    func start(_ onChange: @escaping @Sendable (NetworkPathState) -> Void)
    /// Stops reporting.
    func cancel()
}

/// What the system says of the network path.
struct NetworkPathState: Sendable, Hashable {
    /// A path is usable.
    var usable: Bool
    /// It costs the user (cellular, a personal hotspot) or they asked to
    /// save data (Low Data Mode).
    var metered: Bool
}

#if canImport(Network)
    /// `NWPathMonitor` (iOS 12, macOS 10.14, tvOS 12, watchOS 5: below
    /// Spool's floor) on a queue of its own.
    final class SystemNetworkPath: NetworkPathSource {
        private let monitor = NWPathMonitor()
        private let queue = DispatchQueue(label: "spool.network-path", qos: .utility)

        func start(_ onChange: @escaping @Sendable (NetworkPathState) -> Void) {
            monitor.pathUpdateHandler = { path in
                onChange(
                    NetworkPathState(usable: path.status == .satisfied, metered: path.isExpensive || path.isConstrained)
                )
            }
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
    private let state = Protected<(path: NetworkPathState, onChange: (@Sendable (NetworkPathState) -> Void)?)>(
        (NetworkPathState(usable: true, metered: false), nil))

    init(available: Bool = true) {
        state.withLock { $0.path.usable = available }
    }

    func start(_ onChange: @escaping @Sendable (NetworkPathState) -> Void) {
        let path = state.withLock { state in
            state.onChange = onChange
            return state.path
        }
        onChange(path)
    }

    func cancel() {
        state.withLock { $0.onChange = nil }
    }

    /// Reports a path (`available`, `metered`) to whoever started this source.
    func set(available: Bool, metered: Bool = false) {
        let (path, onChange) = state.withLock { state in
            state.path = NetworkPathState(usable: available, metered: metered)
            return (state.path, state.onChange)
        }
        onChange?(path)
    }
}
