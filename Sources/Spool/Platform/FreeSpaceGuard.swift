import Foundation
import SpoolStorage

/// Keeps the database file from growing while the volume holding it is
/// nearly full.
///
/// After a commit — at most once every `interval` seconds, and off Spool's
/// queues, since the platform's answer can take a few milliseconds — the
/// volume's free space is read (``SpoolPlatform/availableSpace(at:)``). Below the minimum, the log's
/// bounds become the events and bytes it holds at that moment, and the
/// history's the rows it holds: each new event makes the oldest give way, as the queue
/// bound does (every consumer that had not finished one counts it as
/// dropped), so the file stops growing; its WAL is truncated, then
/// checkpointed after every commit, so it starts over instead of growing (a
/// checkpoint per commit, only while space is short); and a
/// ``SpoolDiagnostic/Kind/lowDiskSpace`` diagnostic says why. With one and a
/// half times the minimum free again, the configured bounds return, with a
/// ``SpoolDiagnostic/Kind/diskSpaceRecovered`` diagnostic.
final class FreeSpaceGuard: Sendable {
    private struct State {
        var lastCheck = -Double.infinity
        var checking = false
        var low = false
    }

    private let state = Protected(State())
    private let path: String
    private let platform: any SpoolPlatform
    private let minimum: Int64
    /// The free space at which the configured bounds return: one and a half
    /// times the minimum.
    private var resume: Int64 { minimum + minimum / 2 }
    private let interval: TimeInterval
    /// What `interval` is measured on.
    private let clock: any SpoolClock
    private let diagnostics: DiagnosticsCenter
    /// Freezes the bounds (true) or gives the configured ones back (false);
    /// returns what it froze them at, or the error that kept it from it.
    private let bound: @Sendable (_ low: Bool, _ done: @escaping @Sendable (Result<Int, any Error>) -> Void) -> Void
    /// Called after each commit while space is short (it checkpoints).
    private let whileLow: @Sendable () -> Void

    init(
        path: String, platform: any SpoolPlatform, minimum: Int64, interval: TimeInterval, clock: any SpoolClock,
        diagnostics: DiagnosticsCenter,
        whileLow: @escaping @Sendable () -> Void,
        bound: @escaping @Sendable (_ low: Bool, _ done: @escaping @Sendable (Result<Int, any Error>) -> Void) -> Void
    ) {
        self.path = path
        self.platform = platform
        self.minimum = minimum
        self.interval = interval
        self.clock = clock
        self.diagnostics = diagnostics
        self.whileLow = whileLow
        self.bound = bound
    }

    /// After a commit: reads the free space if the last reading is older
    /// than `interval` (and none runs).
    func committed() {
        let now = clock.now
        let (due, low) = state.withLock { state -> (Bool, Bool) in
            guard !state.checking, now - state.lastCheck >= interval else { return (false, state.low) }
            state.checking = true
            state.lastCheck = now
            return (true, state.low)
        }
        if low { whileLow() }
        guard due else { return }
        DispatchQueue.global(qos: .utility).async { self.check() }
    }

    private func check() {
        let free = platform.availableSpace(at: path)
        let change = state.withLock { state -> Bool? in
            state.checking = false
            guard let free else { return nil }
            // Back to normal only with half the minimum again to spare: the
            // WAL truncated on the way down gives space back, which must not
            // flip the guard straight back.
            let low = state.low ? free < self.resume : free < self.minimum
            guard low != state.low else { return nil }
            state.low = low
            return low
        }
        guard let low = change, let free else { return }
        let (diagnostics, minimum) = (self.diagnostics, self.minimum)
        bound(low) { result in
            switch (low, result) {
            case (true, .success(let events)):
                diagnostics.report(
                    .lowDiskSpace,
                    "\(free) bytes free on the database's volume, below the minimum of \(minimum): the file stops growing — the log keeps what it holds (\(events) events), and each new one makes the oldest give way (counted as dropped)"
                )
            case (true, .failure(let error)):
                diagnostics.report(
                    .lowDiskSpace, error: SpoolError.bridge(error),
                    "\(free) bytes free on the database's volume, below the minimum of \(minimum), but the log's size could not be read: it keeps its configured bound"
                )
            case (false, _):
                diagnostics.report(
                    .diskSpaceRecovered,
                    "\(free) bytes free on the database's volume again (minimum \(minimum)): the configured bounds are back"
                )
            }
        }
    }
}

extension EventEngine {
    /// The free-space guard for `log`, when the database is a file and a
    /// minimum is set.
    func makeFreeSpaceGuard(_ log: EventLog) -> FreeSpaceGuard? {
        guard case .file(let url) = configuration.database, let minimum = configuration.minimumFreeDiskSpace else {
            return nil
        }
        let bounds = QueueBounds(
            count: configuration.retainedEvents, bytes: configuration.maximumQueueBytes,
            age: configuration.maximumEventAge)
        let history = EventLog.HistoryLimits(
            maximumAge: configuration.historyRetention, maximumRows: configuration.maximumHistoryRows)
        let whileLow: @Sendable () -> Void = { [weak log] in
            // On the database queue, right after the commit: the next commit
            // then writes the WAL from its start.
            log?.database.async { $0?.checkpointPassive() }
        }
        return FreeSpaceGuard(
            path: url.path, platform: configuration.platform, minimum: minimum,
            interval: configuration.freeSpaceCheckInterval, clock: configuration.clock, diagnostics: diagnosticsCenter,
            whileLow: whileLow
        ) { [weak log] low, done in
            guard let log else { return }
            guard low else {
                log.setQueueBounds(bounds)
                log.setHistoryLimits(history)
                return done(.success(bounds.count ?? 0))
            }
            log.database.async { connection in
                guard let connection else { return done(.failure(SpoolError.closed)) }
                do {
                    let (events, bytes, rows, valueRows) = try connection.heldAmounts()
                    let kept = min(bounds.count ?? .max, events)
                    log.setQueueBounds(
                        QueueBounds(
                            count: kept, bytes: min(bounds.bytes ?? .max, max(bytes, 1)), age: bounds.age,
                            freeSpace: true))
                    log.setHistoryLimits(
                        EventLog.HistoryLimits(
                            maximumAge: history.maximumAge,
                            // The writer prunes the history every 1,024 rows:
                            // fewer would empty it.
                            maximumRows: min(history.maximumRows ?? .max, max(rows, 1_024)),
                            maximumValueRows: min(history.maximumValueRows ?? .max, max(valueRows, 1_024))))
                    // Give back what the WAL holds beyond its pages in use.
                    // Busy (a reader elsewhere): it starts over later.
                    try? connection.truncateWAL()
                    done(.success(kept))
                } catch {
                    done(.failure(error))
                }
            }
        }
    }
}
