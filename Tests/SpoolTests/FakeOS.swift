import Foundation

@testable import Spool
@testable import SpoolStorage

/// A scripted operating system for the engine's platform seam: it reports
/// the lifecycle when a test says so, grants background time or refuses it
/// with the system's contract (a refusal calls the block once, expired), and
/// lets the test end the time it granted.
final class FakeOS: SpoolPlatform {
    /// What a request for background time gets.
    enum Grant: Sendable {
        /// Time until the test expires it.
        case granted
        /// None: the block is called once, with `expired` true.
        case refused
    }

    private struct Activity {
        let block: @Sendable (Bool) -> Void
        var expired = false
        var running = true
    }

    private struct State {
        var grant = Grant.granted
        var observers: [Int: @Sendable (PlatformEvent) -> Void] = [:]
        var nextObserver = 0
        var activities: [Int: Activity] = [:]
        var requested = 0
        var freeSpace: Int64?
        var filePolicies: [String] = []
    }

    private let state = Protected(State())
    let networkPath = ManualNetworkPath()

    init(grant: Grant = .granted) {
        state.withLock { $0.grant = grant }
    }

    /// What later requests for background time get.
    var grant: Grant {
        get { state.withLock { $0.grant } }
        set { state.withLock { $0.grant = newValue } }
    }

    // MARK: What the engine asks

    func observeLifecycle(_ handler: @escaping @Sendable (PlatformEvent) -> Void) -> PlatformObservation {
        let id = state.withLock { state -> Int in
            state.nextObserver += 1
            state.observers[state.nextObserver] = handler
            return state.nextObserver
        }
        return PlatformObservation { [weak self] in self?.state.withLock { _ = $0.observers.removeValue(forKey: id) } }
    }

    func performExpiringActivity(reason: String, _ block: @escaping @Sendable (Bool) -> Void) {
        let (grant, id) = state.withLock { state -> (Grant, Int) in
            state.requested += 1
            if state.grant == .granted { state.activities[state.requested] = Activity(block: block) }
            return (state.grant, state.requested)
        }
        // A thread of its own, as ProcessInfo's: the block may wait there
        // for the work, which must not take a thread the executor needs.
        Thread { [self] in
            guard grant == .granted else { return block(true) }
            block(false)
            state.withLock { $0.activities[id]?.running = false }
        }.start()
    }

    func makeNetworkPath() -> (any NetworkPathSource)? { networkPath }

    let backgroundTransfers = BackgroundTransferCenter()
    /// The system's background transfer service, which outlives the engines
    /// (and so the app's launches) that use it.
    let backgroundSession = FakeBackgroundSession()

    func makeBackgroundSession(
        identifier: String, sharedContainer: String?, events: @escaping @Sendable (BackgroundTransferEvent) -> Void
    ) -> (any BackgroundTransferSession)? {
        backgroundSession.connect(identifier: identifier, events: events)
        return backgroundSession
    }

    func completeBackgroundEvents(_ handler: @escaping @Sendable () -> Void) {
        handler()
    }

    func availableSpace(at path: String) -> Int64? {
        state.withLock { $0.freeSpace } ?? SystemPlatform.shared.availableSpace(at: path)
    }

    func applyFilePolicy(to file: String, protection: FileProtection?, excludeFromBackup: Bool) throws {
        state.withLock { $0.filePolicies.append(file) }
    }

    // MARK: What the test does

    /// Tells every observing engine `event`, on this thread.
    func send(_ event: PlatformEvent) {
        for handler in state.withLock({ Array($0.observers.values) }) { handler(event) }
    }

    /// Ends the time of every activity still running, as the system does
    /// before it suspends the app (the blocks are called from another thread).
    func expireRunning() {
        let blocks = state.withLock { state -> [@Sendable (Bool) -> Void] in
            var blocks: [@Sendable (Bool) -> Void] = []
            for (id, activity) in state.activities where activity.running && !activity.expired {
                state.activities[id]?.expired = true
                blocks.append(activity.block)
            }
            return blocks
        }
        for block in blocks { Thread { block(true) }.start() }
    }

    /// Engines observing the lifecycle now.
    var observers: Int { state.withLock { $0.observers.count } }
    /// Requests for background time so far.
    var activitiesRequested: Int { state.withLock { $0.requested } }
    /// Activities whose block has not returned.
    var activitiesRunning: Int { state.withLock { $0.activities.values.filter(\.running).count } }
    /// The free space reported; nil: the real volume's.
    var freeSpace: Int64? {
        get { state.withLock { $0.freeSpace } }
        set { state.withLock { $0.freeSpace = newValue } }
    }
}

extension EngineConfiguration {
    /// This configuration on `os`.
    func on(_ os: FakeOS) -> EngineConfiguration {
        var configuration = self
        configuration.platform = os
        return configuration
    }
}
