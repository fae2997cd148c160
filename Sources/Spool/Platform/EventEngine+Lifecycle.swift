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

extension EventEngine {
    /// Call when the app (or extension) enters the background: queued events
    /// are uploaded, then Spool stops touching the database file until
    /// ``applicationDidBecomeActive()`` (unless
    /// ``EngineConfiguration/suspendsInBackground`` is false).
    ///
    /// Spool calls it itself where UIKit reports the lifecycle (apps, and
    /// app extensions through their host's notifications); hosts that cannot
    /// observe it (watchOS extensions, other platforms) call it, or
    /// ``SpoolBackgroundNotifier``, themselves. Returns at once from any
    /// thread; the work runs in a background activity the OS grants, and an
    /// upload still in flight when that time runs out is abandoned (its
    /// events stay queued).
    public func applicationDidEnterBackground() {
        guard
            state.withLock({ state -> Bool in
                guard state.phase == .started else { return false }
                state.inBackground = true
                return true
            })
        else { return }
        // Unstructured: the notification is synchronous; upload and suspension wait for network and file.
        Task { await self.goToBackground() }
    }

    /// Call when the app becomes active again: Spool touches the database
    /// file again and uploads what is due. Returns at once from any thread.
    public func applicationDidBecomeActive() {
        let database = state.withLock { state -> DatabaseQueue? in
            state.inBackground = false
            return state.log?.database
        }
        database?.resume()
        uploaderBox.withLock { $0 }?.requestFlushFromAnyThread()
    }

    /// True while the database is suspended for the background.
    package var isDatabaseSuspended: Bool {
        state.withLock { $0.log?.database.isSuspended ?? false }
    }

    private func goToBackground() async {
        await BackgroundActivity.run("Spool: upload queued events and release the database") { expiry in
            guard let log = self.state.withLock({ $0.log }) else { return }
            log.database.resume()  // already suspended (a second notification): upload first
            if let uploader = self.uploaderBox.withLock({ $0 }) {
                expiry.onExpiry { uploader.abandonInFlightFromAnyThread() }
                do { try await uploader.flush() } catch {}  // failures are reported by the uploader; events stay queued
            }
            guard self.configuration.suspendsInBackground, self.state.withLock({ $0.inBackground }) else { return }
            await log.database.suspend()
            // Came back to the foreground meanwhile: resume at once.
            if !self.state.withLock({ $0.inBackground }) { log.database.resume() }
        }
    }

    /// Runs `body` with the database touchable: in a background window when
    /// it is suspended (then suspended again), directly otherwise.
    func withDatabaseAwake(_ body: @escaping @Sendable () async throws -> Void) async throws {
        guard let log = state.withLock({ $0.log }), log.database.isSuspended else { return try await body() }
        let outcome = Promise<Result<Void, any Error>>()
        await BackgroundActivity.run("Spool: upload queued events") { _ in
            log.database.resume()
            do {
                try await body()
                outcome.fulfill(.success(()))
            } catch {
                outcome.fulfill(.failure(error))
            }
            if self.state.withLock({ $0.inBackground && $0.phase == .started }) { await log.database.suspend() }
        }
        try await outcome.value.get()
    }

    /// Work arrived while suspended (an app running in the background
    /// recorded events): run it in a background window, then suspend again.
    func runDeferredWorkInBackgroundWindow() {
        guard let log = state.withLock({ $0.log }) else { return }
        // Unstructured: called on the database queue, which must not wait for the window.
        Task {
            await BackgroundActivity.run("Spool: commit events recorded in the background") { expiry in
                log.database.resume()
                if !expiry.isExpired {
                    do { try await log.waitUntilAllDurable() } catch {}  // failures are reported as diagnostics
                }
                guard self.state.withLock({ $0.inBackground && $0.phase == .started }) else { return }
                await log.database.suspend()
            }
        }
    }

    /// Observes the platform's lifecycle notifications once per start, and
    /// joins the background notifier.
    func startObservingLifecycle() {
        let tokens = state.withLock { state -> Bool in
            state.lifecycleTokens.isEmpty
        }
        if tokens {
            let observed = LifecycleObservation.observe(self)
            state.withLock { $0.lifecycleTokens = observed }
        }
        SpoolBackgroundNotifier.register(self)
    }

    /// Removes the observers (close).
    func stopObservingLifecycle() {
        let tokens = state.withLock { state -> [any NSObjectProtocol] in
            defer { state.lifecycleTokens.removeAll() }
            return state.lifecycleTokens
        }
        LifecycleObservation.remove(tokens)
    }
}
