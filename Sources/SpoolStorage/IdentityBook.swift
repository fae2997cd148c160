import Foundation

/// The identity and context in force for one engine's events: the single
/// owner of both, read on the record path (one lock) and written on the
/// database queue.
///
/// Several processes share the file's identity: the row with the latest
/// change time (`created_at`, taken when the change is made, whenever its row
/// is written) is in force. A commit that finds a later change than this
/// process's own (another process identified or reset) adopts it, for every
/// event recorded from the change's time on, in that commit and every later
/// one; once an event took it, no later event goes back.
///
/// An erasure (in any process) deletes every row and leaves one anonymous
/// identity; a process that notices it (`log_head.erasures` moved) stamps
/// every event it still holds with that identity, or with a change it made
/// after the erasure, rebuilt on it.
package final class IdentityBook: Sendable {
    private struct State {
        /// What events accepted now refer to; a new object when either part
        /// changes.
        var stamps: RecordStamps
        /// The highest `identities` id this process wrote or has seen.
        var newestKnown: Int64 = 0
        /// The latest change time this process made or has seen: a change
        /// made now is ordered after it, whatever the clock says.
        var latestChange = -Double.infinity
        /// The file's erasure count, once read.
        var erasures: Int64?
        /// How many erasures this process has noticed: the era of new stamps.
        var era = 0
        /// The identity the last erasure left: what stamps of earlier eras
        /// become.
        var eraStart: IdentityStamp?

        var identity: IdentityStamp {
            get { stamps.identity }
            set { stamps = RecordStamps(identity: newValue, context: stamps.context) }
        }
        var context: ContextStamp? {
            get { stamps.context }
            set { stamps = RecordStamps(identity: stamps.identity, context: newValue) }
        }

        mutating func know(_ row: IdentityRow) {
            newestKnown = max(newestKnown, row.id)
            latestChange = max(latestChange, row.createdAt)
        }
    }

    private let state: Protected<State>

    package init(at now: Double) {
        state = Protected(State(stamps: RecordStamps(identity: IdentityStamp(.file, at: now), context: nil)))
    }

    /// What an event accepted now is stamped with.
    package var current: RecordStamps {
        state.withLock { $0.stamps }
    }

    /// Makes a new identity current: `userID` and `traitsJSON` (nil: the
    /// current traits) over the current anonymous id, or over
    /// `newAnonymousID` (a reset). The change
    /// is ordered after every change this process made or has seen, even if
    /// the clock went back.
    package func change(userID: String?, traitsJSON: String?, newAnonymousID: String? = nil, at now: Double) {
        state.withLock { state in
            let at = now > state.latestChange ? now : state.latestChange + Self.tick(state.latestChange)
            state.latestChange = at
            state.identity = IdentityStamp(
                .changed(base: state.identity, userID: userID, traitsJSON: traitsJSON, anonymousID: newAnonymousID),
                at: at, era: state.era)
        }
    }

    /// The smallest step after `time` that a REAL column keeps apart from it.
    private static func tick(_ time: Double) -> Double {
        max(1e-6, time.ulp * 4)
    }

    /// Makes `json` (a JSON object) the current context; nil: none.
    package func setContext(_ json: String?, at now: Double) {
        state.withLock { $0.context = json.map { ContextStamp(json: $0, at: now) } }
    }

    /// After this process erased the file (``Connection/eraseAll()``): every
    /// event still held and every later one gets `identity`, the anonymous
    /// identity the erasure left.
    package func erased(leaving identity: IdentityRow, erasures: Int64) {
        state.withLock { state in
            state.newestKnown = 0
            startEra(leaving: identity, erasures: erasures, in: &state, keepingLaterChange: false)
        }
    }

    /// The identity in force on this file, its row written if it has none
    /// yet (at open, after a change), in one transaction with the look for
    /// another process's change. On the database queue.
    ///
    /// Without `changes` (consent withheld), only the identity the changes
    /// were made over is read or written (a new file's anonymous id): no
    /// user id or traits reach the file.
    @discardableResult
    package func persist(on connection: Connection, changes: Bool = true) throws -> IdentityRow {
        try connection.sealingTransaction {
            try refresh(on: connection)
            let stamp = changes ? current.identity : current.identity.root
            let row = try stamp.resolve(on: connection)
            state.withLock { $0.know(row) }
            return row
        }
    }

    /// What a commit's transaction wrote for its stamps: to undo in memory
    /// if it rolls back (``rolledBack(_:)``), since those rows were never
    /// written.
    package struct Written {
        var identities: [IdentityStamp] = []
        var contexts: [ContextStamp] = []
        var newestKnown: Int64 = 0

        package init() {}
    }

    /// Each record's identity row and context row, written where missing, for
    /// a commit. On the database queue, inside the commit's transaction.
    ///
    /// `records` are each record's stamps and time, in group order.
    /// Consecutive records with the same stamps (all of them, unless the
    /// identity or context changed during the group, or a successor takes
    /// over from a time within it) are looked at once.
    package func rows(
        for records: some Sequence<(stamps: RecordStamps?, recordedAt: Double)>, on connection: Connection,
        written: inout Written
    ) throws -> CommitStamps {
        written.newestKnown = state.withLock { $0.newestKnown }
        let erasures = try refresh(on: connection)
        let (era, eraStart) = state.withLock { ($0.era, $0.eraStart) }
        var result = CommitStamps()
        var previous: RecordStamps?
        var previousDependsOnTime = false
        var last: (stamp: IdentityStamp, row: IdentityRow)?
        var lastContext: (stamp: ContextStamp, id: Int64)?
        for (stamps, recordedAt) in records {
            if !previousDependsOnTime, result.count > 0, stamps === previous {
                result.repeatLast()
                continue
            }
            previous = stamps
            previousDependsOnTime = false
            var identity: IdentityRow?
            if let carried = stamps?.identity {
                let (stamp, dependsOnTime) = Self.effective(carried, at: recordedAt, era: era, eraStart: eraStart)
                previousDependsOnTime = dependsOnTime
                if let last, last.stamp === stamp {
                    identity = last.row
                } else {
                    if stamp.row == nil { written.identities.append(stamp) }
                    let row = try stamp.resolve(on: connection)
                    state.withLock { $0.know(row) }
                    last = (stamp, row)
                    identity = row
                }
            }
            var contextID: Int64?
            if let context = stamps?.context {
                if let lastContext, lastContext.stamp === context {
                    contextID = lastContext.id
                } else {
                    if !context.hasRow(erasures: erasures) { written.contexts.append(context) }
                    let id = try context.resolve(on: connection, erasures: erasures)
                    lastContext = (context, id)
                    contextID = id
                }
            }
            result.append(identity: identity, contextID: contextID)
        }
        return result
    }

    /// The stamp an event that carries `carried` and was recorded at
    /// `recordedAt` is written with, and whether that depends on the time
    /// (a successor takes over later than `recordedAt`).
    private static func effective(
        _ carried: IdentityStamp, at recordedAt: Double, era: Int, eraStart: IdentityStamp?
    ) -> (IdentityStamp, dependsOnTime: Bool) {
        var stamp = carried
        if stamp.era != era, let eraStart {
            // Made before the last erasure this process noticed: its row is
            // gone. The change it was rebuilt as, if any, or what the
            // erasure left.
            if let rebuilt = stamp.successor, rebuilt.since == -.infinity, rebuilt.stamp.era == era {
                stamp = rebuilt.stamp
            } else {
                stamp = eraStart
            }
        }
        while let successor = stamp.successor {
            guard successor.since == -.infinity || recordedAt >= successor.since else {
                return (stamp, true)
            }
            if successor.since != -.infinity { stamp.successorApplied() }
            stamp = successor.stamp
        }
        return (stamp, false)
    }

    /// Undoes in memory what a rolled-back commit wrote: its stamps get
    /// their rows again at the next commit, never the ids the rollback freed
    /// (another row may take those).
    package func rolledBack(_ written: Written) {
        for stamp in written.identities { stamp.forgetRow() }
        for context in written.contexts { context.forgetRow() }
        state.withLock { $0.newestKnown = written.newestKnown }
    }

    /// Looks for another process's erasure and identity change since the
    /// last look, and takes them in; returns the file's erasure count.
    @discardableResult
    private func refresh(on connection: Connection) throws -> Int64 {
        let watermark = try connection.identityWatermark()
        let (known, knownErasures) = state.withLock { ($0.newestKnown, $0.erasures) }
        var noticedErasure = false
        if let knownErasures, watermark.erasures > knownErasures {
            noticedErasure = true
            let left = try connection.identityLeftByErasure()
            state.withLock { state in
                state.newestKnown = 0
                startEra(leaving: left, erasures: watermark.erasures, in: &state, keepingLaterChange: true)
            }
        } else if knownErasures != watermark.erasures {
            // The first look, or a file whose count went back (set aside
            // and salvaged unread): nothing to drop.
            state.withLock { $0.erasures = watermark.erasures }
        }
        guard noticedErasure || watermark.newestID > known, let row = try connection.identityInForce() else {
            return watermark.erasures
        }
        state.withLock { state in
            state.newestKnown = max(state.newestKnown, watermark.newestID)
            state.latestChange = max(state.latestChange, row.createdAt)
            let current = state.identity
            if case .file = current.origin, current.row == nil { return }  // it resolves to `row`
            let order = current.order
            guard row.id != current.row?.id,
                row.createdAt > order || (row.createdAt == order && row.id > current.row?.id ?? .max)
            else { return }
            let adopted = IdentityStamp(.row(row), at: row.createdAt, era: state.era)
            current.succeed(by: adopted, since: row.createdAt)
            state.identity = adopted
        }
        return watermark.erasures
    }

    /// Starts a new era after an erasure that left `identity` (nil: rows
    /// deleted by hand; the file's identity is written at the next commit):
    /// the current identity is followed by it, or, if it is a change made
    /// after the erasure and `keepingLaterChange`, by the same change rebuilt
    /// on it.
    private func startEra(
        leaving identity: IdentityRow?, erasures: Int64, in state: inout State, keepingLaterChange: Bool
    ) {
        state.era += 1
        state.erasures = erasures
        let start: IdentityStamp
        if let identity {
            state.know(identity)
            start = IdentityStamp(.row(identity), at: identity.createdAt, era: state.era)
        } else {
            start = IdentityStamp(.file, at: state.latestChange, era: state.era)
        }
        state.eraStart = start
        let current = state.identity
        var next = start
        if keepingLaterChange, let identity, current.row == nil, current.createdAt >= identity.createdAt,
            case .changed(_, let userID, let traitsJSON, let anonymousID) = current.origin
        {
            next = IdentityStamp(
                .changed(base: start, userID: userID, traitsJSON: traitsJSON, anonymousID: anonymousID),
                at: current.createdAt, era: state.era)
        }
        current.succeed(by: next, since: -.infinity)
        state.identity = next
    }
}

/// The identity and context rows of a commit's records, as runs of
/// consecutive records with the same rows.
package struct CommitStamps: Sendable {
    private struct Run {
        /// The offset in the group just past the run.
        var end: Int
        var identity: IdentityRow?
        var contextID: Int64?
    }

    private var runs: [Run] = []

    /// The records counted so far.
    package var count: Int { runs.last?.end ?? 0 }

    package init() {}

    /// The rows of the record at `offset` in the group: nil and nil when
    /// there is none (a log without an identity book).
    package func rows(at offset: Int) -> (identity: IdentityRow?, contextID: Int64?) {
        guard let run = run(at: offset) else { return (nil, nil) }
        return (runs[run].identity, runs[run].contextID)
    }

    /// The ids of ``rows(at:)``, without copying the identity row.
    package func ids(at offset: Int) -> (identityID: Int64?, contextID: Int64?) {
        guard let run = run(at: offset) else { return (nil, nil) }
        return (runs[run].identity?.id, runs[run].contextID)
    }

    private func run(at offset: Int) -> Int? {
        // Runs are few: a binary search for the first that ends past offset.
        var low = 0
        var high = runs.count
        while low < high {
            let middle = (low + high) / 2
            if runs[middle].end <= offset { low = middle + 1 } else { high = middle }
        }
        return low < runs.count ? low : nil
    }

    mutating func append(identity: IdentityRow?, contextID: Int64?) {
        if let last = runs.last, last.identity?.id == identity?.id, last.contextID == contextID {
            repeatLast()
        } else {
            runs.append(Run(end: count + 1, identity: identity, contextID: contextID))
        }
    }

    mutating func repeatLast() {
        runs[runs.count - 1].end += 1
    }
}
