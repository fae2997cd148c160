import Foundation
import SpoolStorage

/// What starts, ends, pauses and stops flush passes: the triggers (commits,
/// the timer, `flush()`, the app's lifecycle), performed as
/// ``UploadSchedule`` says.
extension Uploader {
    /// Stops the timer and retries and lets a request in flight finish (at
    /// most `patience` seconds) so its answer is saved. The engine gives up
    /// the lease afterwards, with its other leases.
    /// A request still unanswered after that is abandoned: its answer is
    /// ignored and its events are sent again by whoever uploads next (at
    /// least once).
    func stop(patience: TimeInterval = 5) async {
        networkPath?.cancel()
        timerStopped.withLock { $0 = true }
        await withCheckedContinuation { continuation in
            // Resumed by the pass's end or by the patience timer,
            // whichever comes first.
            let once = Protected(false)
            let resume: @Sendable () -> Void = {
                let first = once.withLock { done in
                    defer { done = true }
                    return !done
                }
                if first { continuation.resume() }
            }
            let stop = schedule.stop(resume)
            for waiter in stop.failing { waiter.resume(throwing: SpoolError.closed) }
            if let now = stop.resumeNow {
                now()
            } else {
                // A dispatch timer: it touches no database state, so it
                // fires while suspended without asking for a background window.
                log.database.timer(after: patience) { _ in resume() }
            }
        }
    }

    // MARK: - Triggers

    /// The writer committed up to `head` (called on the database queue, for
    /// every commit): starts a flush once `batchSize` events are pending.
    ///
    /// Uploads found paused start no pass, unless the database says they are
    /// paused no more: another engine on the file may have resumed them, and
    /// nothing but the database tells this one.
    nonisolated func committed(head: Int64) {
        let (due, paused) = signals.withLock { signals -> (Bool, Bool) in
            signals.head = max(signals.head, head)
            guard !signals.flushRequested, settings.flushIsDue(pending: signals.pending) else { return (false, false) }
            guard !signals.paused else { return (false, true) }
            signals.flushRequested = true
            return (true, false)
        }
        // Only when a flush is due, not per commit.
        if due || (paused && resumedElsewhere()) { enter { $0.trigger(force: false) } }
    }

    /// On the database queue, with uploads found paused: whether the
    /// database says they are paused no more. Then a flush is requested (the
    /// pass clears the flag). A read that fails says nothing: the next
    /// commit, or the timer's pass, looks again.
    private nonisolated func resumedElsewhere() -> Bool {
        let paused: Bool
        do {
            paused = try log.database.onQueue { try $0.uploadsPaused() }
        } catch {
            return false
        }
        guard !paused else { return false }
        return signals.withLock { signals in
            guard !signals.flushRequested else { return false }
            signals.flushRequested = true
            return true
        }
    }

    /// The periodic flush: every `interval` seconds of the database's clock
    /// while events are pending. A dispatch timer on the database queue, so
    /// it keeps time however busy the concurrency pool is; it reads only
    /// `signals`, so it fires while suspended without asking for a
    /// background window (and starts nothing then), and it hops onto the
    /// actor only when events are pending.
    nonisolated func armTimer(_ interval: TimeInterval) {
        log.database.timer(after: interval) { [weak self] firing in
            guard let self, !self.timerStopped.withLock({ $0 }) else { return }
            if case .closed = firing { return }
            if case .awake = firing, self.hasPending { self.enter { $0.timerFired() } }
            self.armTimer(interval)
        }
    }

    private func timerFired() {
        if hasPending { trigger(force: false) }
    }

    /// Events wait for the uploader.
    nonisolated var hasPending: Bool { signals.withLock { $0.pending } > 0 }

    /// Entering background, the dispatcher's `flushEvents()`, or a host's
    /// notifier: upload now, unless backing off.
    func requestFlush() {
        trigger(force: false)
    }

    /// ``requestFlush()`` for synchronous callers (lifecycle notifications,
    /// the dispatcher's `flushEvents()`).
    nonisolated func requestFlushFromAnyThread() {
        enter { $0.requestFlush() }
    }

    /// Runs `body` on the actor, for synchronous code: the commit handler, a
    /// timer's block on the database queue, a notification, the network
    /// path's monitor. `body` only flips state or starts a pass.
    nonisolated func enter(_ body: @escaping @Sendable (isolated Uploader) -> Void) {
        // Unstructured: the one way from synchronous code onto the actor; nothing waits for it.
        Task { await body(self) }
    }

    /// Uploads everything pending now, ignoring any backoff wait.
    ///
    /// - Throws: ``SpoolError/uploadDeferred(reason:)`` when the collector could not
    ///   take it all (the rest stays queued and is retried with backoff), or
    ///   when another process holds the upload lease (it uploads them).
    func flush() async throws {
        try await waitForPass(force: true)
    }

    /// Waits for the next pass to begin and end (`force`: one that ignores
    /// the backoff).
    func waitForPass(force: Bool) async throws {
        try await withCheckedThrowingContinuation { continuation in
            signals.withLock { $0.flushRequested = false }
            switch schedule.flush(continuation, force: force) {
            case .closed(let waiter): waiter.resume(throwing: SpoolError.closed)
            case .kept(let start): if start { startPasses() }
            }
        }
    }

    func trigger(force: Bool) {
        signals.withLock { $0.flushRequested = false }
        if schedule.trigger(.init(force: force)) { startPasses() }
    }

    /// Pulls `trigger`, if any.
    func pull(_ trigger: UploadSchedule<CheckedContinuation<Void, any Error>, @Sendable () -> Void>.Trigger?) {
        if let trigger { self.trigger(force: trigger.force) }
    }

    private func startPasses() {
        // A task so the caller (a commit, a timer) never waits for the network.
        Task { await self.run() }
    }

    /// Flush passes, one at a time, until none is owed. A ``pause()`` ends
    /// the pass after the request in flight; its callers and triggers wait
    /// for the pass after ``resume()``.
    private func run() async {
        while true {
            let result: Result<Void, any Error>
            let succeeded: Bool
            do {
                try await drain(force: schedule.passBegins())
                (result, succeeded) = (.success(()), true)
            } catch {
                (result, succeeded) = (.failure(error), false)
            }
            let end = schedule.passEnded(succeeded: succeeded)
            for waiter in end.resume { waiter.resume(with: result) }
            guard end.another else {
                for resume in end.passWaiters { resume() }
                return
            }
        }
    }

    /// Waits for the pass in flight (its request answered, its position
    /// saved) and starts no other until ``resume()``: for erasure and consent
    /// withdrawal, which must not race an upload.
    func pause() async {
        await withCheckedContinuation { continuation in
            let resume: @Sendable () -> Void = { continuation.resume() }
            schedule.pause(resume)?()
        }
    }

    /// Ends one ``pause()`` and starts what was requested meanwhile.
    func resume() {
        // Positions are read again by the next pass (erasure moved them): no
        // database access here, which may be suspended by now.
        pull(schedule.resume())
    }
}
