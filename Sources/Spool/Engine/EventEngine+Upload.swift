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
    /// - Throws: ``SpoolError/uploadDeferred(reason:)`` when the collector could not
    ///   take it all (the rest stays queued and is retried with backoff);
    ///   ``SpoolError/notStarted`` before `start()`; ``SpoolError/suspended``
    ///   in the background when the OS grants no time, or while the device is
    ///   locked with ``FileProtection/complete`` (nothing was sent), or when
    ///   the time it granted ran out first (the requests in flight were
    ///   abandoned; their events stay queued). Without a `collectorURL`,
    ///   returns at once.
    public func flush() async throws {
        guard state.withLock({ $0.isStarted }) else { throw SpoolError.notStarted }
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
    /// - Throws: ``SpoolError/notUploading`` when no
    ///   `collectorURL` is configured; ``SpoolError/notStarted`` before
    ///   ``start()``; ``SpoolError/closed`` once the database is closed.
    public func uploadStatistics() async throws -> UploadStatistics {
        guard let uploader = uploaderBox.withLock({ $0 }) else {
            guard configuration.collectorURL == nil else { throw SpoolError.notStarted }
            throw SpoolError.notUploading
        }
        return try await SpoolError.bridgingAsync { try await uploader.statistics() }
    }

    /// The result of every upload request from now on, as an
    /// `AsyncSequence` (on the delivery queue, in the order they were sent);
    /// it ends when the engine closes.
    ///
    /// ```swift
    /// for await result in engine.uploadResults() where result.outcome != .accepted {
    ///     logger.warning("\(result.eventCount) events: \(result.status.map(String.init) ?? "no answer") \(result.outcome)")
    /// }
    /// ```
    public func uploadResults() -> AsyncStream<UploadBatchResult> {
        uploadResultCenter.stream()
    }

    /// Puts dead letters back at the tail of the log, for the uploader, with
    /// their ids (so the collector can deduplicate them), and starts an
    /// upload. Listeners do not get them again. Oldest first, and at most as
    /// many as the queue bound has room for (queued events never give way
    /// to them): call again once those are uploaded to put back the rest.
    ///
    /// Call it once what made the collector refuse them is fixed: after a
    /// write-key rotation, after a collector release that reads what it
    /// refused. Events refused for their content are refused again and
    /// return to the dead letters.
    ///
    /// - Parameter filter: which dead letters: all, those refused with one
    ///   status, or those whose reason contains a text.
    /// - Returns: how many were put back.
    /// - Throws: ``SpoolError/notStarted`` before `start()`;
    ///   ``SpoolError/notUploading`` without a `collectorURL`;
    ///   ``SpoolError/suspended`` as ``flush()`` throws it (nothing was put
    ///   back).
    @discardableResult
    public func requeueDeadLetters(_ filter: DeadLetterFilter = .all) async throws -> Int {
        guard let log = state.withLock({ $0.isStarted ? $0.log : nil }) else { throw SpoolError.notStarted }
        guard let uploader = uploaderBox.withLock({ $0 }) else {
            throw SpoolError.notUploading
        }
        let (status, reason): (Int?, String?)
        switch filter {
        case .all: (status, reason) = (nil, nil)
        case .status(let code): (status, reason) = (code, nil)
        case .reasonContaining(let text): (status, reason) = (nil, text)
        }
        let bound = configuration.retainedEvents
        let requeued = Protected((count: 0, head: Int64(0)))
        try await SpoolError.bridgingAsync {
            // In the background the database is suspended: wake it for this.
            try await withDatabaseAwake {
                let result = try await log.database.run { connection in
                    let result = try connection.requeueDeadLetters(
                        status: status, reasonContaining: reason, maximumRetained: bound)
                    // As a commit tells it, on the database queue: with
                    // uploads paused it asks the database whether they
                    // still are.
                    if result.count > 0 { uploader.committed(head: result.head) }
                    return result
                }
                requeued.withLock { $0 = result }
            }
        }
        let count = requeued.withLock { $0.count }
        if count > 0 { uploader.requestFlushFromAnyThread() }
        return count
    }

    // MARK: - Pausing and the network

    /// Stops uploading without giving up anything: recording, the database,
    /// listeners, the history and the queue's bounds go on, and nothing is
    /// sent (or handed to the system) until ``resumeUploads()``. The pause
    /// is kept in the database, for every process using the file and across
    /// launches; ``UploadStatistics/paused`` reports it. A request in flight
    /// is allowed to finish first; `flush()` then throws
    /// ``SpoolError/uploadDeferred(reason:)`` saying uploads are paused.
    ///
    /// For a backend incident, or a user's choice to stop uploading for a
    /// while. (Withdrawing consent is different: it discards the queue.)
    ///
    /// - Throws: ``SpoolError/notStarted`` before `start()`;
    ///   ``SpoolError/notUploading`` without a `collectorURL`;
    ///   ``SpoolError/suspended`` as ``flush()`` throws it; ``SpoolError/sqlite(_:)``
    ///   when the pause could not be saved (nothing changed).
    public func pauseUploads() async throws {
        try await setUploadsPaused(true)
    }

    /// Lets uploads go again after ``pauseUploads()`` (in this process or
    /// another), and uploads what waits.
    ///
    /// - Throws: as ``pauseUploads()``.
    public func resumeUploads() async throws {
        try await setUploadsPaused(false)
    }

    private func setUploadsPaused(_ paused: Bool) async throws {
        guard state.withLock({ $0.isStarted }) else { throw SpoolError.notStarted }
        guard let uploader = uploaderBox.withLock({ $0 }) else {
            throw SpoolError.notUploading
        }
        try await SpoolError.bridgingAsync {
            try await withDatabaseAwake {
                // The pass in flight ends before a pause is saved.
                try await self.quiescingUploads { try await uploader.setUploadsPaused(paused) }
            }
        }
    }

    /// Changes which networks uploads may use from now on (a user's "upload
    /// on Wi-Fi only" setting); see ``UploadPolicy``. Allowed again, what
    /// waits goes out at once. Applies to this engine; set
    /// ``EngineConfiguration/uploadPolicy`` at every launch.
    public func setUploadPolicy(_ policy: UploadPolicy) {
        state.withLock { $0.uploadPolicy = policy }
        uploaderBox.withLock { $0 }?.enter { $0.setPolicy(policy) }
    }

    // MARK: - Wiring

    func startUploader(_ log: EventLog) async throws -> Uploader? {
        guard let url = configuration.collectorURL else { return nil }
        let dispatcher = configuration.dispatcher ?? DefaultEventDispatcher()
        let defaults = dispatcher as? DefaultEventDispatcher
        var settings = Uploader.Settings(
            url: url, batchSize: configuration.uploadBatchSize, timerInterval: configuration.uploadTimerInterval,
            retry: configuration.retryPolicy, concurrentRequests: configuration.concurrentRequests)
        // The HTTP transport gives up after twice its request timeout.
        if let defaults { settings.dispatchTimeout = defaults.requestTimeout * 2 + 5 }
        let (state, platform, configuration) = (self.state, configuration.platform, configuration)
        var files: TransferFiles?
        if case .file(let file) = configuration.database {
            files = TransferFiles(databaseFile: file) { path in
                // The system's transfer service reads the file while the
                // device may be locked: never complete protection.
                try platform.applyFilePolicy(
                    to: path,
                    protection: configuration.fileProtection.map {
                        $0 == .unprotected ? $0 : .completeUntilFirstUserAuthentication
                    },
                    excludeFromBackup: configuration.excludesFromBackup)
            }
        }
        let uploader = Uploader(
            log: log, dispatcher: dispatcher, settings: settings, owner: leaseOwner, diagnostics: diagnosticsCenter,
            results: uploadResultCenter, deadLetterLimits: configuration.deadLetterLimits,
            networkPath: configuration.networkPath ?? platform.makeNetworkPath(), transferFiles: files,
            policy: state.withLock { $0.uploadPolicy ?? configuration.uploadPolicy }
        ) {
            state.withLock { $0.consent && $0.enabled && $0.uploads.isAllowed }
                && !log.database.isSuspended
        }
        try await uploader.start()
        uploaderBox.withLock { $0 = uploader }
        await startBackgroundTransfers(uploader)
        // Weak: the uploader holds the dispatcher, which holds this handler.
        defaults?.setFlushHandler { [weak uploader] in uploader?.requestFlushFromAnyThread() }
        return uploader
    }

    func stopUploader() async {
        guard let uploader = uploaderBox.withLock({ $0 }) else { return }
        if let identifier = backgroundSessionIdentifier {
            configuration.platform.backgroundTransfers.detach(identifier)
        }
        await uploader.stop()
    }
}
