import Foundation
import SpoolStorage

extension EventEngine {
    /// Uploads everything queued now, ignoring any backoff wait, and returns
    /// when it is uploaded (or dead-lettered). While the user has opted out or
    /// the engine is disabled nothing is uploaded, and this returns at once.
    /// Events stored while recording was disabled wait for it to be enabled
    /// again; events recorded before consent was withdrawn are never uploaded
    /// (withdrawing consent discards the upload queue).
    ///
    /// In the background, while the database is suspended, the upload runs in
    /// a background window the OS grants, and the database is suspended again
    /// after it.
    ///
    /// - Throws: ``UploadError/retryable(_:)`` when the collector could not
    ///   take it all (the rest stays queued and is retried with backoff);
    ///   ``SpoolError/notStarted`` before `start()`. Without a `collectorURL`,
    ///   returns at once.
    public func flush() async throws {
        guard state.withLock({ $0.phase == .started }) else { throw SpoolError.notStarted }
        guard let uploader = uploaderBox.withLock({ $0 }) else { return }
        try await SpoolError.bridgingAsync {
            try await settle()
            // Consent came back while the queue before it was being
            // discarded: that finishes first, then what came after uploads.
            await pendingDiscard()?.value
            // In the background the database is suspended: wake it for this.
            try await withDatabaseAwake { try await uploader.flush() }
        }
    }

    /// What the uploader has done and what waits.
    ///
    /// `pending`, `dropped` and `deadLettered` are read from the database, so
    /// they include what other processes sharing the file did; the request
    /// counters are this process's.
    ///
    /// - Throws: ``SpoolError/invalidConfiguration(_:)`` when no
    ///   `collectorURL` is configured; ``SpoolError/notStarted`` before
    ///   ``start()``; ``SpoolError/closed`` once the database is closed.
    public func uploadStatistics() async throws -> UploadStatistics {
        guard let uploader = uploaderBox.withLock({ $0 }) else {
            guard configuration.collectorURL == nil else { throw SpoolError.notStarted }
            throw SpoolError.invalidConfiguration("no collectorURL is configured, so nothing is uploaded")
        }
        return try await SpoolError.bridgingAsync { try await uploader.statistics() }
    }

    // MARK: - Wiring

    func startUploader(_ log: EventLog) async throws -> Uploader? {
        guard let url = configuration.collectorURL else { return nil }
        let dispatcher = configuration.dispatcher ?? DefaultEventDispatcher()
        let policy = dispatcher as? any BatchingPolicy
        let defaults = dispatcher as? DefaultEventDispatcher
        var settings = Uploader.Settings(
            url: url, batchSize: max(1, policy?.batchSize ?? DefaultEventDispatcher.defaultBatchSize),
            timerInterval: max(0, policy?.timerInterval ?? DefaultEventDispatcher.defaultTimerInterval),
            retry: configuration.retryPolicy)
        // The HTTP transport gives up after twice its request timeout.
        if let defaults { settings.dispatchTimeout = defaults.requestTimeout * 2 + 5 }
        let state = self.state
        let uploader = Uploader(
            log: log, dispatcher: dispatcher, settings: settings, owner: leaseOwner, diagnostics: diagnosticsCenter
        ) {
            state.withLock { $0.consent && $0.enabled && $0.uploads.isAllowed }
                && !log.database.isSuspended
        }
        try await uploader.start()
        uploaderBox.withLock { $0 = uploader }
        // Weak: the uploader holds the dispatcher, which holds this handler.
        defaults?.setFlushHandler { [weak uploader] in uploader?.requestFlushFromAnyThread() }
        return uploader
    }

    func stopUploader() async {
        guard let uploader = uploaderBox.withLock({ $0 }) else { return }
        await uploader.stop()
    }
}
