import Foundation
import SpoolStorage

// MARK: - A damaged page found while running

extension EventEngine {
    /// Seconds between two salvages while running: a file that cannot be
    /// salvaged is not rebuilt at every read that fails.
    static let runningSalvageInterval: TimeInterval = 60

    /// Salvages the file in place when a read or write while running finds
    /// a page SQLite reports malformed (`SQLITE_CORRUPT`): the pages
    /// `start()` reads are only the ends of each table, so a damaged page in
    /// the middle of the log shows up when the uploader or a durable
    /// listener reaches it. Set up by ``start()``, for a file with salvage on.
    func salvagesWhileRunning(_ log: EventLog, mark: CommitMark?) {
        guard case .file = configuration.database, configuration.salvagesDamagedDatabase else { return }
        let (lastAttempt, clock) = (Protected<Double?>(nil), configuration.clock)
        log.database.onDamage.withLock { handler in
            // Weak: the database queue must not keep the engine or the log alive.
            handler = { [weak self, weak log] error in
                let due = lastAttempt.withLock { last in
                    let now = clock.now
                    guard last.map({ now - $0 >= Self.runningSalvageInterval }) ?? true else { return false }
                    last = now
                    return true
                }
                guard due, let log else { return }
                // A block of its own, after the one that found the damage
                // (no statement of it is left open).
                log.database.async { [weak self] connection in
                    guard let self, connection != nil else { return }
                    self.salvageInPlace(log, mark: mark, reason: Self.reason(error))
                }
            }
        }
    }

    /// Gives the database files at `path` their protection class and backup
    /// exclusion (Apple platforms), reporting when that fails.
    func applyFilePolicy(_ path: String) {
        guard case .file = configuration.database,
            let failure = DatabaseFilePolicy.apply(
                to: path, protection: configuration.fileProtection,
                excludeFromBackup: configuration.excludesFromBackup, on: configuration.platform)
        else { return }
        diagnosticsCenter.report(
            .filePolicyNotApplied, error: failure,
            "the database files' protection class or backup exclusion could not be set")
    }

    /// On the database queue: builds a fresh file beside the damaged one
    /// with every row it can still read, moves the damaged one aside, and
    /// goes on with the fresh one, as ``start()`` does with a file it cannot
    /// use. The buffered events commit to the fresh file; the uploader reads
    /// its position from it (a batch in flight is sent again); the durable
    /// listeners attached here start again from their positions in it.
    private func salvageInPlace(_ log: EventLog, mark: CommitMark?, reason: String) {
        let database = log.database
        let (path, date) = (database.path, Date(timeIntervalSince1970: configuration.clock.now))
        let options = configuration.connectionOptions(sealer: sealer, undecryptable: undecryptable)
        // The open lock: no other process opens (or salvages) the file meanwhile.
        mark?.mark.lock()
        defer { mark?.mark.unlock() }
        // Another process salvaged it first: the file at the path is its
        // fresh one, which must not be set aside in turn.
        guard database.hasTheFileAtPath else { return followFileSalvagedElsewhere(log, mark: mark, locked: true) }
        let found = mark?.mark.read()
        do {
            let outcome = try database.replaceFile {
                try Salvager.salvage(path: path, options: options, mark: found, date: date)
            }
            try goOnWithTheFileAtPath(log, mark: mark)
            let report = SalvageReport(outcome, reason: reason, date: date)
            state.withLock { $0.salvage = report }
            diagnosticsCenter.report(.storeSalvaged, eventCount: report.lost.events, "\(report)")
        } catch {
            // The damaged file is where it was (or nothing could be opened,
            // and every later read and commit fails). Each read or commit
            // that meets the damage reports it where it happens
            // (`uploadFailed`, `durableListenerStalled`, `commitFailed`, or
            // the caller's error), and the next of them tries again, at most
            // once a minute; this says why the salvage did not help.
            diagnosticsCenter.report(
                .salvageFailed, error: SpoolError.bridge(error),
                "a malformed page was met while running and the file could not be salvaged (\(reason)); "
                    + "it is tried again when the damage is met next, at most once a minute")
        }
    }

    /// On the database queue, the file just put under its connections:
    /// gives it its file policy, the mark its identity and head, and the
    /// durable listeners attached here their positions in it.
    private func goOnWithTheFileAtPath(_ log: EventLog, mark: CommitMark?) throws {
        let database = log.database
        applyFilePolicy(database.path)
        let shape = try database.onQueue { try $0.logShape() }
        mark?.reset(shape)
        try database.onQueue { connection in events.durables.reattach(log, connection: connection) }
    }

    /// On the database queue: another process salvaged the file this one
    /// has open (it moved it aside, and put a fresh one at the path). Goes
    /// on with the fresh file as after a salvage of its own, without
    /// rebuilding anything. `locked`: the caller holds the open lock.
    func followFileSalvagedElsewhere(_ log: EventLog, mark: CommitMark?, locked: Bool = false) {
        let database = log.database
        if !locked { mark?.mark.lock() }
        defer { if !locked { mark?.mark.unlock() } }
        guard !database.hasTheFileAtPath else { return }  // followed already
        do {
            try database.replaceFile {}
            try goOnWithTheFileAtPath(log, mark: mark)
            diagnosticsCenter.report(
                .storeSalvagedElsewhere,
                "another process salvaged the database file and put a fresh one at \(database.path); this process "
                    + "goes on with it. What it committed to the old file since that salvage began is in the "
                    + "set-aside copy")
        } catch {
            diagnosticsCenter.report(
                .salvageFailed, error: SpoolError.bridge(error),
                "another process salvaged the database file, and the fresh file at \(database.path) could not be "
                    + "opened")
        }
    }
}
