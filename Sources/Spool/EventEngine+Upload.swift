import Foundation

#if canImport(UIKit) && !os(watchOS)
    import UIKit
#endif

extension EventEngine {
    /// Uploads everything queued now, ignoring any backoff wait, and returns
    /// when it is uploaded (or dead-lettered). While the user has opted out or
    /// the engine is disabled nothing is uploaded, and this returns at once;
    /// the events wait for consent to return.
    ///
    /// - Throws: ``UploadError/retryable(_:)`` when the collector could not
    ///   take it all (the rest stays queued and is retried with backoff);
    ///   ``SpoolError/notStarted`` before `start()`. Without a `collectorURL`,
    ///   returns at once.
    public func flush() async throws {
        guard state.withLock({ $0.phase == .started }) else { throw SpoolError.notStarted }
        guard let uploader = uploaderBox.withLock({ $0 }) else { return }
        try await settle()
        try await uploader.flush()
    }

    /// Call when the app enters the background (D9): queued events are
    /// uploaded now. Spool calls it itself where UIKit reports the lifecycle;
    /// hosts that cannot observe it (watchOS extensions, app extensions,
    /// other platforms) call it, or ``SpoolBackgroundNotifier``, themselves.
    public func applicationDidEnterBackground() {
        guard let uploader = uploaderBox.withLock({ $0 }) else { return }
        Task { await uploader.requestFlush() }
    }

    /// Call when the app becomes active again: uploads what is due.
    public func applicationDidBecomeActive() {
        guard let uploader = uploaderBox.withLock({ $0 }) else { return }
        Task { await uploader.requestFlush() }
    }

    /// What the uploader has done and what waits.
    public func uploadStatistics() async throws -> UploadStatistics {
        guard let uploader = uploaderBox.withLock({ $0 }) else {
            throw SpoolError.invalidConfiguration("no collectorURL is configured, so nothing is uploaded")
        }
        return try await uploader.statistics()
    }

    // MARK: - Wiring

    func startUploader(_ log: EventLog) async throws -> Uploader? {
        guard let url = configuration.collectorURL else { return nil }
        let dispatcher = configuration.dispatcher ?? DefaultEventDispatcher()
        let policy = dispatcher as? any BatchingPolicy
        let settings = Uploader.Settings(
            url: url, batchSize: max(1, policy?.batchSize ?? DefaultEventDispatcher.defaultBatchSize),
            timerInterval: max(0, policy?.timerInterval ?? DefaultEventDispatcher.defaultTimerInterval),
            retry: configuration.retryPolicy)
        let defaults = dispatcher as? DefaultEventDispatcher
        let state = self.state
        let uploader = Uploader(log: log, dispatcher: dispatcher, settings: settings) {
            state.withLock { $0.consent && $0.enabled }
        }
        try await uploader.start()
        uploaderBox.withLock { $0 = uploader }
        defaults?.setFlushHandler { Task { await uploader.requestFlush() } }
        SpoolBackgroundNotifier.register(self)
        #if canImport(UIKit) && !os(watchOS)
            observeApplicationLifecycle()
        #endif
        return uploader
    }

    func stopUploader() async {
        guard let uploader = uploaderBox.withLock({ $0 }) else { return }
        (configuration.dispatcher as? DefaultEventDispatcher)?.setFlushHandler(nil)
        await uploader.stop()
    }

    #if canImport(UIKit) && !os(watchOS)
        private func observeApplicationLifecycle() {
            let center = NotificationCenter.default
            center.addObserver(forName: UIApplication.didEnterBackgroundNotification, object: nil, queue: nil) {
                [weak self] _ in self?.applicationDidEnterBackground()
            }
            center.addObserver(forName: UIApplication.didBecomeActiveNotification, object: nil, queue: nil) {
                [weak self] _ in self?.applicationDidBecomeActive()
            }
        }
    #endif
}

/// For hosts that cannot observe the app lifecycle (a watchOS extension
/// delegate, a command-line tool): forwards to every started engine that
/// uploads (D9).
public enum SpoolBackgroundNotifier {
    private struct Entry {
        weak var engine: EventEngine?
    }

    private static let engines = Protected<[Entry]>([])

    static func register(_ engine: EventEngine) {
        engines.withLock { entries in
            entries.removeAll { $0.engine == nil }
            entries.append(Entry(engine: engine))
        }
    }

    private static var live: [EventEngine] {
        engines.withLock { $0.compactMap(\.engine) }
    }

    /// The app moved to the background: upload what is queued.
    public static func applicationDidEnterBackground() {
        for engine in live { engine.applicationDidEnterBackground() }
    }

    /// The app is active again.
    public static func applicationDidBecomeActive() {
        for engine in live { engine.applicationDidBecomeActive() }
    }
}
