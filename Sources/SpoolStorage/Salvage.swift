import Foundation

/// What a salvage did: where the damaged file went, and the rows it copied
/// and knows it lost.
package struct SalvageOutcome: Sendable, Hashable {
    /// Row counts per table.
    package struct Rows: Sendable, Hashable {
        package var events = 0
        package var consumers = 0
        package var history = 0
        package var deadLetters = 0

        package init(events: Int = 0, consumers: Int = 0, history: Int = 0, deadLetters: Int = 0) {
            self.events = events
            self.consumers = consumers
            self.history = history
            self.deadLetters = deadLetters
        }
    }

    /// The damaged database's new path (its `-wal` and `-shm` beside it).
    package var copyPath = ""
    /// Whether it held Spool's schema (its copy then expires; see
    /// ``DamagedCopies``).
    package var recognized = false
    package var recovered = Rows()
    /// Rows known to have been in the file that could not be read.
    package var lost = Rows()
    /// Every page of Spool's tables could be read: no more was lost than
    /// `lost` counts.
    package var complete = true
    /// The fresh file's head.
    package var head: Int64 = 0

    package init() {}
}

/// Replaces a database that cannot be used by a fresh one holding every row
/// that could still be read.
package enum Salvager {
    /// Builds a fresh database beside the damaged one at `path` (``DamagedCopies/buildingPath``)
    /// with every row it can still read, row by row; then moves the damaged
    /// file and its `-wal` and `-shm` aside under a dated name, and the fresh
    /// one into its place. Older recognised copies go (the last one is kept).
    ///
    /// `kind` names the copy when the file holds Spool's schema:
    /// ``DamagedCopies/Kind/newer`` for a file whose schema is newer than
    /// this library's (only the tables and columns the fresh file has are
    /// copied; the rest stays in the copy), ``DamagedCopies/Kind/damaged``
    /// otherwise. A file without Spool's schema is always
    /// ``DamagedCopies/Kind/unrecognized``.
    ///
    /// `mark` is the high-water mark found beside it: when it names this
    /// file, positions up to it count as committed.
    ///
    /// Nothing is deleted that the fresh file does not hold: when any step
    /// fails, the damaged file stays (or is put back) where it was, the
    /// half-built fresh one is removed, and the error is thrown.
    package static func salvage(
        path: String, options: ConnectionOptions, mark: StoreMark.Value?, date: Date,
        kind: DamagedCopies.Kind = .damaged
    ) throws -> SalvageOutcome {
        let copies = DamagedCopies(databasePath: path)
        let building = copies.buildingPath
        DamagedCopies.remove(built: building)  // what a salvage killed half-way left
        var outcome: SalvageOutcome
        do {
            outcome = try build(building, from: path, options: options, mark: mark)
            let copy = copies.newPath(outcome.recognized ? kind : .unrecognized, at: date)
            try copies.move(from: path, to: copy)
            do {
                try copies.move(from: building, to: path)
            } catch {
                // Put the damaged file back rather than leave nothing at
                // `path`; if even that fails, it is still whole at `copy`.
                try? copies.move(from: copy, to: path)
                throw error
            }
            outcome.copyPath = copy
        } catch {
            DamagedCopies.remove(built: building)
            throw error
        }
        if outcome.recognized { copies.deleteDamaged(before: nil, keeping: outcome.copyPath) }
        return outcome
    }

    /// Creates the fresh database at `target` and copies into it what
    /// `source` still holds.
    private static func build(
        _ target: String, from source: String, options: ConnectionOptions, mark: StoreMark.Value?
    ) throws -> SalvageOutcome {
        let fresh = try Connection(path: target, options: options)
        defer { fresh.close() }
        try Migrator(migrations: Migration.embedded).migrate(fresh)
        var outcome = SalvageOutcome()
        if let reader = SalvageSource(path: source), reader.schemaReadable, reader.isSpoolDatabase {
            outcome.recognized = true
            try SalvageCopy(from: reader, into: fresh, mark: mark).run(&outcome)
        } else {
            outcome.complete = false
        }
        // Everything into the file itself: the WAL goes when it closes.
        try fresh.truncateWAL()
        return outcome
    }
}
