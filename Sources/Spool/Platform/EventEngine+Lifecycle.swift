import Foundation
import SpoolStorage

// MARK: - The app's lifecycle: background uploads and suspension
//
// iOS kills a suspended process that holds a lock on a file in an app-group
// container (0xdead10cc). So when the app — or an extension sharing the
// file — goes to the background, Spool uploads what waits and then suspends
// its database inside a background activity: the transaction in progress
// finishes, none starts, the checkpointer stops, and no lock or read
// transaction stays on the file. Work that arrives meanwhile (an app running
// in the background records events) runs in a short background window of its
// own, then the database suspends again. Returning to the foreground resumes.
// While the device is locked and the files have complete protection, the
// database is suspended too, and no window opens until it is unlocked.
//
// Every decision is made here, from what the platform reports
// (``SpoolPlatform``); the platform only reports and grants time.

extension EventEngine {
    /// Call when the app (or extension) enters the background: queued events
    /// are uploaded, then Spool stops touching the database file until
    /// ``applicationDidBecomeActive()`` (unless
    /// ``EngineConfiguration/suspendsInBackground`` is false).
    ///
    /// Spool calls it itself where UIKit reports the lifecycle (apps, and
    /// app extensions through their host's notifications); hosts that cannot
    /// observe it (watchOS extensions, other platforms) call it, or
    /// ``SpoolBackgroundNotifier``, themselves. Called before ``start()``
    /// (a launch in the background), it applies once the engine has started.
    /// Returns at once from any thread; the work runs in a background
    /// activity the OS grants, and an upload still in flight when that time
    /// runs out is abandoned (its events stay queued). When the OS grants no
    /// time, nothing is uploaded and the database is suspended at once.
    public func applicationDidEnterBackground() {
        let started = state.withLock { state -> Bool in
            state.inBackground = true
            return state.isStarted
        }
        guard started else { return }
        // Unstructured: the notification is synchronous; upload and suspension wait for network and file.
        Task { await self.goToBackground() }
    }

    /// Call when the app becomes active again: Spool touches the database
    /// file again and uploads what is due. Returns at once from any thread.
    public func applicationDidBecomeActive() {
        state.withLock { $0.inBackground = false }
        applyLifecycle()
        uploaderBox.withLock { $0 }?.requestFlushFromAnyThread()
    }

    /// What the engine does for each report of the platform.
    func react(to event: PlatformEvent) {
        switch event {
        case .didEnterBackground: applicationDidEnterBackground()
        case .willEnterForeground, .didBecomeActive: applicationDidBecomeActive()
        case .willResignActive: uploaderBox.withLock { $0 }?.requestFlushFromAnyThread()
        case .protectedDataWillBecomeUnavailable:
            let lockedOut = state.withLock { state in
                state.protectedDataUnavailable = true
                return state.isLockedOut(configuration)
            }
            // Other protection classes keep the file usable: a background
            // upload under way goes on, and its activity suspends after it.
            guard lockedOut else { return }
            // Unstructured: the notification is synchronous; the commit in progress finishes first.
            Task { await self.suspendIfWanted() }
        case .protectedDataDidBecomeAvailable:
            state.withLock { $0.protectedDataUnavailable = false }
            applyLifecycle()
            // Still suspended (in the background): what was recorded while
            // locked commits in a window now.
            if isDatabaseSuspended { runDeferredWorkInBackgroundWindow() }
        case .memoryWarning: releaseMemory()
        }
    }

    /// True while the database is suspended for the background.
    package var isDatabaseSuspended: Bool {
        state.withLock { $0.log?.database.isSuspended ?? false }
    }

    /// Resumes the database when nothing wants it suspended (the commits
    /// buffered meanwhile then run), goes to the background when the app is
    /// there and the database is not yet suspended, and suspends it when
    /// the device is locked with the app in the foreground (locked while
    /// `start()` opened the file).
    func applyLifecycle() {
        let (log, wanted, background) = state.withLock {
            ($0.log, $0.wantsSuspension(configuration), $0.inBackground && $0.isStarted)
        }
        guard let log else { return }
        if !wanted {
            log.database.resume()
        } else if !log.database.isSuspended {
            // Unstructured: called from notifications and start(), which do not wait for the file.
            Task { background ? await self.goToBackground() : await self.suspendIfWanted() }
        }
    }

    /// Suspends the database if the engine still wants it suspended once
    /// the suspension holds, and resumes it if not: the app may have come
    /// back while the commit in progress finished.
    private func suspendIfWanted() async {
        guard let log = state.withLock({ $0.suspendsNow(configuration) ? $0.log : nil }) else { return }
        await log.database.suspend()
        if !state.withLock({ $0.suspendsNow(configuration) }) { log.database.resume() }
    }

    /// Uploads what waits, then suspends the database, in one background
    /// activity at a time: a report that comes while one runs makes it run
    /// once more after, so that switches faster than the work hold no more
    /// than one of the system's threads.
    private func goToBackground() async {
        let first = state.withLock { state -> Bool in
            guard !state.goingToBackground else {
                state.backgroundAgain = true
                return false
            }
            state.goingToBackground = true
            return true
        }
        guard first else { return }
        while true {
            await BackgroundActivity.run(
                on: configuration.platform, "Spool: upload queued events and release the database"
            ) { expiry in
                guard let log = self.state.withLock({ $0.inBackground ? $0.log : nil }) else { return }
                guard !expiry.isExpired, !self.state.withLock({ $0.isLockedOut(self.configuration) }) else {
                    return await self.suspendIfWanted()
                }
                // Already suspended (a second notification): upload first.
                await self.awake(log, until: expiry) {
                    // Failures are reported by the uploader; the events stay queued.
                    if let uploader = self.uploaderBox.withLock({ $0 }) {
                        do { try await uploader.flush() } catch {}
                    }
                }
            }
            let again = state.withLock { state -> Bool in
                guard state.backgroundAgain else {
                    state.goingToBackground = false
                    return false
                }
                state.backgroundAgain = false
                return true
            }
            guard again else { return }
        }
    }

    /// Runs `body` with the database touchable: in a background window of
    /// its own while the app is in the background (the database suspended,
    /// or awake for another window that may end first), directly otherwise.
    ///
    /// - Throws: ``SpoolError/suspended`` when the device is locked (the
    ///   files cannot be touched), the OS grants no background time, or the
    ///   time runs out before an upload is done; what `body` throws.
    func withDatabaseAwake(_ body: @escaping @Sendable () async throws -> Void) async throws {
        guard
            let log = state.withLock({ state in
                state.wantsSuspension(configuration) || state.log?.database.isSuspended == true ? state.log : nil
            })
        else { return try await body() }
        guard !state.withLock({ $0.isLockedOut(configuration) }) else { throw SpoolError.suspended }
        let outcome = Promise<Result<Void, any Error>>()
        await BackgroundActivity.run(on: configuration.platform, "Spool: upload queued events") { expiry in
            guard !expiry.isExpired else { return outcome.fulfill(.failure(SpoolError.suspended)) }
            await self.awake(log, until: expiry) {
                do {
                    try await body()
                    outcome.fulfill(.success(()))
                } catch {
                    outcome.fulfill(.failure(error))
                }
            }
        }
        try await outcome.value.get()
    }

    /// Runs `work`, the body of a background activity, with the database
    /// awake: resumed for it and kept awake while any such window runs,
    /// then suspended once the last one has ended (if the engine still
    /// wants it; a device locked with complete protection suspends it at
    /// once). When the activity's time runs out, the uploader gives up on
    /// its requests in flight and sends none until this window has ended,
    /// so that no pass that starts meanwhile sends without time to finish.
    private func awake(_ log: EventLog, until expiry: BackgroundActivity.Expiry, _ work: () async -> Void) async {
        let hold = uploaderBox.withLock { $0 }?.backgroundHold()
        if let hold { expiry.onExpiry { hold.expire() } }
        state.withLock { $0.awakeWindows += 1 }
        log.database.resume()
        await work()
        state.withLock { $0.awakeWindows -= 1 }
        await suspendIfWanted()
        hold?.release()
    }

    /// Work arrived while suspended (an app running in the background
    /// recorded events): run it in a background window, then suspend again.
    /// While the device is locked, or when the OS grants no time, it waits
    /// for the database to resume.
    func runDeferredWorkInBackgroundWindow() {
        guard let log = state.withLock({ $0.isLockedOut(configuration) ? nil : $0.log }) else { return }
        // Unstructured: called on the database queue, which must not wait for the window.
        Task {
            await BackgroundActivity.run(
                on: configuration.platform, "Spool: commit events recorded in the background"
            ) { expiry in
                guard !expiry.isExpired, !self.state.withLock({ $0.isLockedOut(self.configuration) }) else { return }
                // The commits may start an upload.
                await self.awake(log, until: expiry) {
                    do { try await log.waitUntilAllDurable() } catch {}  // failures are reported as diagnostics
                }
            }
        }
    }

    /// The system is short of memory: commit what the write buffer holds
    /// now, and let SQLite give back the memory it can.
    private func releaseMemory() {
        guard let log = state.withLock({ $0.log }) else { return }
        // Unstructured: the notification is synchronous.
        Task {
            // A failed commit is reported as a diagnostic; the events stay buffered.
            do { try await log.waitUntilAllDurable() } catch {}
            guard !log.database.isSuspended else { return }
            log.database.async { $0?.releaseMemory() }
        }
    }
}
