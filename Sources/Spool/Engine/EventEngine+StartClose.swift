import Foundation
import SpoolStorage

// MARK: - Starting and closing

extension EventEngine {
    /// Opens and migrates the database, starts a session (recording
    /// `session_start`), delivers the events recorded before it, and fires
    /// `.ready`.
    ///
    /// It checks the linked SQLite before touching any file, gives the
    /// database files their data-protection class and backup exclusion
    /// (Apple platforms: ``EngineConfiguration/fileProtection``,
    /// ``EngineConfiguration/excludesFromBackup``), and starts following the
    /// app's lifecycle (see ``applicationDidEnterBackground()``).
    ///
    /// The file work runs off the caller's executor, so calling this from the
    /// main actor does not block it. When it returns, `session_start` and the
    /// events recorded before it are committed and delivered, and every
    /// ``EventTopic/ready`` callback has run. Durable listeners added before
    /// this call have caught up with what they missed (unless another process
    /// holds them).
    ///
    /// A file it cannot use as it is (not a database, malformed, cut short,
    /// missing events it committed, a schema no migration explains) is
    /// salvaged: set aside, with every row that can still be read copied into
    /// a fresh file (see ``SalvageReport`` and ``salvageReport``). So is a
    /// file a newer version of the app migrated to a schema this library
    /// does not know: its rows are copied in the tables and columns this
    /// library knows, and its queued events are uploaded. It reads
    /// only the ends of each table: a malformed page that a later read or
    /// commit meets is salvaged then, while the engine runs. Events the file
    /// had committed and lost (a WAL deleted after a crash) are reported as a
    /// ``SpoolDiagnostic/Kind/committedEventsMissing`` diagnostic, and their
    /// positions are not handed out again.
    ///
    /// - Throws: ``SpoolError`` when the database cannot be
    ///   opened (``SpoolError/cannotOpen(path:reason:)``; with
    ///   ``EngineConfiguration/salvagesDamagedDatabase`` off, or when a
    ///   salvage cannot finish,
    ///   ``SpoolError/schemaTooNew(path:version:latestKnown:)``,
    ///   ``SpoolError/notADatabase(path:)``,
    ///   ``SpoolError/damaged(path:reason:)``,
    ///   ``SpoolError/schemaUnexplained(path:version:reason:)`` or
    ///   ``SpoolError/sqlite(_:)`` with `.corrupt`…); the engine can then be started
    ///   again, and the events recorded meanwhile are kept.
    ///   ``SpoolError/unsupportedSQLite(version:reason:)`` when the
    ///   SQLite library the app links is too old or lacks the JSON functions
    ///   (no file was touched). ``SpoolError/alreadyStarted`` when called
    ///   twice; ``SpoolError/conflictingDatabaseLocation(configured:requested:)``
    ///   when the dispatcher's `backingStore` and `dataStoreName` ask for
    ///   another location than ``EngineConfiguration/database`` (no file was
    ///   touched); ``SpoolError/closed`` after ``close()``.
    public func start() async throws {
        if let conflict = configuration.locationConflict { throw conflict }
        let finished = Promise<Void>()
        // The platform's reports are observed from the start, so that none
        // made while the file opens (a launch in the background) is lost;
        // close() cancels them whenever it comes.
        let observation = configuration.platform.observeLifecycle { [weak self] event in self?.react(to: event) }
        try state.withLock { state in
            switch state.phase {
            case .idle:
                state.phase = .starting(opened: finished)
                state.observation = observation
            case .closing, .closed:
                observation.cancel()
                throw SpoolError.closed
            case .starting, .started:
                observation.cancel()
                throw SpoolError.alreadyStarted
            }
        }
        defer {
            let failed = state.withLock { state -> PlatformObservation? in
                guard case .starting = state.phase else { return nil }
                state.phase = .idle  // failed: it may be started again
                defer { state.observation = nil }
                return state.observation
            }
            failed?.cancel()
            finished.fulfill(())
        }
        let configuration = self.configuration
        await configuration.startStep?(.opening)
        let opened = try await Self.openDatabase(configuration, sealer: sealer, undecryptable: undecryptable)
        await configuration.startStep?(.opened)
        reportOpening(opened)
        let mark = opened.mark
        let database = opened.database
        applyFilePolicy(database.path)
        let log = EventLog(database: database, limits: configuration.writeBuffer.limits, identities: identities)
        log.setQueueBounds(
            QueueBounds(
                count: configuration.retainedEvents, bytes: configuration.maximumQueueBytes,
                age: configuration.maximumEventAge))
        let limits = EventLog.HistoryLimits(
            maximumAge: configuration.historyRetention, maximumRows: configuration.maximumHistoryRows)
        log.setHistoryLimits(limits)
        // The last event an earlier process left, read before this engine
        // appends any: what a withdrawal before start() discards.
        let headAtOpen: Int64
        do {
            let cutoff = limits.maximumAge.map { configuration.clock.now - $0 }
            let consent = state.withLock { $0.consent }
            let launch: Int64
            await finishPendingRebuild(database)
            (headAtOpen, launch) = try await database.run { [identities] connection in
                _ = try connection.pruneHistory(before: cutoff, keepingAtMost: limits.maximumRows)
                // The file's identity, or a new anonymous id for a new file;
                // a change made before start() only with consent.
                try identities.persist(on: connection, changes: consent)
                return (try connection.headPosition(), try connection.beginLaunch())
            }
            // The clock the events committed from now on measure their age on.
            log.setLaunch(configuration.clock.monotonic.map { EventLog.Launch(id: launch, origin: $0) })
            await configuration.startStep?(.identityRead)
            let uploader = try await startUploader(log)
            await configuration.startStep?(.uploaderStarted)
            // Weak: the log must not keep the delivery queue or the uploader
            // (which hold the log) alive.
            // Survey conditions are counted inside each group's transaction:
            // no later group, and no other process, commits in between.
            log.setGroupReader { [weak surveys] events, connection in
                guard let surveys, surveys.isActive else { return nil }
                return surveys.triggered(by: events(), in: connection)
            }
            let freeSpace = makeFreeSpaceGuard(log)
            log.setCommitHandler { [weak self, weak log, weak delivery, weak uploader] _, head, events, reading in
                // The rows are built only when someone will look at them.
                if let delivery, delivery.isListening {
                    delivery.enqueue(events(), triggered: reading as? [[SurveyMatch]])
                }
                uploader?.committed(head: head)
                // The mark names another file: another process salvaged this
                // one. Followed in a block of its own, after the commit's.
                if mark?.committed(head) == false, let log {
                    log.database.async { [weak self, weak log] connection in
                        guard let self, let log, connection != nil else { return }
                        self.followFileSalvagedElsewhere(log, mark: mark)
                    }
                }
                freeSpace?.committed()
            }
            log.setFailureHandler { [diagnosticsCenter] failure in diagnosticsCenter.report(failure) }
            salvagesWhileRunning(log, mark: mark)
            delivery.setFollower(surveys)
            try await events.durables.open(log, owner: leaseOwner)
            await configuration.startStep?(.durableListenersOpened)
        } catch {
            // Leave nothing half-started: the engine can be started again.
            await stopUploader()
            uploaderBox.withLock { $0 = nil }
            await closeDatabase(log)
            throw SpoolError.bridge(error)
        }
        let closedMeanwhile = state.withLock { state -> Bool in
            guard case .starting = state.phase else { return true }
            state.phase = .started(log)
            if case .withdrawnBeforeStart = state.uploads {
                // Consent was withdrawn before start: what the queue held
                // when the file was opened is never uploaded.
                startDiscard(in: &state) { headAtOpen }
            }
            return false
        }
        if closedMeanwhile {
            // close() ran while this was opening (and stopped the reports):
            // close what was opened.
            await stopUploader()
            await closeDatabase(log)
            throw SpoolError.closed
        }
        log.database.onDeferredWork.withLock { handler in
            handler = { [weak self] in self?.runDeferredWorkInBackgroundWindow() }
        }
        SpoolBackgroundNotifier.register(self)
        startSession()
        // Ready fires once the start-up events (session_start and those
        // recorded before start) are committed and delivered; start() returns
        // after it fired. A commit failure here is already reported as a
        // diagnostic, and the events stay buffered: ready fires regardless.
        do { try await log.waitUntilAllDurable() } catch {}
        await configuration.startStep?(.committed)
        delivery.async { [events] in
            events.registrations.latch(.ready, .ready(at: configuration.clock.now))
        }
        await delivery.drain()
        // Launched in the background, or the device locked, before or while
        // this opened: what the platform said applies now.
        applyLifecycle()
    }

    /// Gives up every lease this engine holds, so another process sharing
    /// the file takes over at once rather than when they expire.
    private func releaseLeases(_ log: EventLog) async {
        let owner = leaseOwner
        let attached = events.durables.close()
        do {
            try await log.database.run { try $0.releaseLeases(owner: owner) }
        } catch {
            // Nothing is lost: a lease left behind expires by itself. Each is
            // reported under the kind of what it holds up.
            // try?: when even the read fails, what this engine may hold stands for it.
            let held = try? await log.database.run { try $0.consumers(leasedBy: owner) }
            let durablePrefix = DurableListeners.Durable.consumerPrefix
            if held.map({ $0.contains(Uploader.consumerID) }) ?? (uploaderBox.withLock { $0 } != nil) {
                diagnosticsCenter.report(
                    .uploadFailed, error: SpoolError.bridge(error),
                    "the upload lease could not be released at close; another process uploads once it expires")
            }
            if held.map({ $0.contains { $0.hasPrefix(durablePrefix) } }) ?? attached {
                diagnosticsCenter.report(
                    .durableListenerStalled, error: SpoolError.bridge(error),
                    "durable listener leases could not be released at close; they expire by themselves")
            }
        }
    }

    /// Lets go of everything the log's handlers and the delivery queue hold.
    private func detach(_ log: EventLog) {
        log.setCommitHandler(nil)
        log.setGroupReader(nil)
        log.setFailureHandler(nil)
        log.database.onDamage.withLock { $0 = nil }  // it holds the mark, whose descriptor then closes
        delivery.setFollower(nil)
    }

    /// Commits everything accepted, delivers what is committed, saves durable
    /// positions and closes the database. Records after this fail with
    /// ``SpoolError/closed``. Events still waiting for a session are stored
    /// without one.
    ///
    /// An upload in flight gets a few seconds to finish so its answer is
    /// saved; if it does not, its events are sent again later (at least
    /// once). Streams end, registrations are dropped, and another process
    /// sharing the file takes over the uploader and durable listeners at
    /// once. A closed engine cannot be started again: create a new one.
    ///
    /// Called while ``start()`` is still opening the database, it returns
    /// once `start()` has closed what it opened (`start()` then throws
    /// ``SpoolError/closed``).
    ///
    /// Events that cannot be committed (the disk is full) are reported as an
    /// ``SpoolDiagnostic/Kind/uncommittedAtClose`` diagnostic, and returned.
    ///
    /// - Returns: how many accepted events could not be committed (0 normally).
    @discardableResult
    public func close() async -> Int {
        let (log, waiting, opening, observation, alreadyClosed) = state.withLock {
            state -> (EventLog?, [Waiting], Promise<Void>?, PlatformObservation?, Bool) in
            var opening: Promise<Void>?
            switch state.phase {
            case .closing, .closed: return (nil, [], nil, nil, true)
            case .idle: state.phase = .closing(nil)
            case .starting(let opened):
                state.phase = .closing(nil)
                opening = opened
            case .started(let log): state.phase = .closing(log)
            }
            defer { state.observation = nil }
            return (state.log, state.gates.takeWaiting(), opening, state.observation, false)
        }
        guard !alreadyClosed else { return 0 }  // a second close() has nothing left to do
        defer { state.withLock { $0.phase = .closed } }
        // A start() still opening sees the phase and closes what it opened.
        await opening?.value
        observation?.cancel()
        log?.database.resume()  // what close() commits and saves needs the file
        guard let log else {
            for entry in waiting { entry.settle?(.failed(SpoolError.closed)) }
            finishSubscribers()
            return 0
        }
        for var entry in waiting {
            entry.record.sessionID = nil
            do {
                entry.settle?(.appended(try log.appendPastBound(entry.record), log))
            } catch {
                entry.settle?(.failed(SpoolError.bridge(error)))
            }
        }
        await stopUploader()
        let report = await log.close()
        if report.uncommitted > 0 {
            diagnosticsCenter.report(
                .uncommittedAtClose, eventCount: report.uncommitted, error: report.error.map(SpoolError.bridge),
                "\(report.uncommitted) accepted events could not be committed before the database closed")
        }
        await delivery.drain()
        await closeDatabase(log)
        finishSubscribers()
        return report.uncommitted
    }

    /// With the uploader stopped: gives up every lease, lets go of what the
    /// log's handlers and the delivery queue hold, and closes the database.
    private func closeDatabase(_ log: EventLog) async {
        await releaseLeases(log)
        detach(log)
        log.database.close()
    }

    /// Ends every stream and drops every registration and diagnostic handler.
    private func finishSubscribers() {
        events.finishAll()
        surveys.finishAll()
        diagnosticsCenter.finishAll()
        uploadResultCenter.finishAll()
    }
}

/// The points where ``EventEngine/start()`` waits, in order.
enum StartStep: Sendable, CaseIterable {
    /// Before the file is opened (off the caller's executor).
    case opening
    /// The file is open, checked and migrated.
    case opened
    /// The history is pruned and the identity read.
    case identityRead
    /// The uploader holds its lease (or there is none).
    case uploaderStarted
    /// Durable listeners caught up.
    case durableListenersOpened
    /// `session_start` and the events recorded before start are committed.
    case committed
}
