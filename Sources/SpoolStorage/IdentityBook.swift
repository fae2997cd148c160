import Foundation

/// The identity and context in force for one engine's events: the single
/// owner of both, read on the record path (one lock) and written on the
/// database queue.
///
/// Several processes share the file's identity: the newest row of
/// `identities` is in force. A commit that finds a newer row than this
/// process knows (another process identified or reset) adopts it, for the
/// events in that commit recorded after the change and for every later one,
/// unless this process changed the identity more recently itself.
package final class IdentityBook: Sendable {
    private struct State {
        /// What events accepted now refer to; a new object when either part
        /// changes.
        var stamps: RecordStamps
        /// The newest `identities` row this process wrote or has seen.
        var newestKnown: Int64 = 0

        var identity: IdentityStamp {
            get { stamps.identity }
            set { stamps = RecordStamps(identity: newValue, context: stamps.context) }
        }
        var context: ContextStamp? {
            get { stamps.context }
            set { stamps = RecordStamps(identity: stamps.identity, context: newValue) }
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

    /// Makes a new identity current: `userID` and `traitsJSON` over the
    /// current anonymous id, or over `newAnonymousID` (a reset).
    package func change(userID: String?, traitsJSON: String, newAnonymousID: String? = nil, at now: Double) {
        state.withLock { state in
            state.identity = IdentityStamp(
                .changed(base: state.identity, userID: userID, traitsJSON: traitsJSON, anonymousID: newAnonymousID),
                at: now)
        }
    }

    /// Makes `json` (a JSON object) the current context; nil: none.
    package func setContext(_ json: String?, at now: Double) {
        state.withLock { $0.context = json.map { ContextStamp(json: $0, at: now) } }
    }

    /// After an erasure deleted every identity and context row: the next
    /// event gets a new anonymous id, and the context is written again.
    package func forgetRows(at now: Double) {
        state.withLock { state in
            state.identity = IdentityStamp(.file, at: now)
            state.context = state.context?.unwritten()
            state.newestKnown = 0
        }
    }

    /// The identity in force on this file, its row written if it has none
    /// yet (at open, after a change). On the database queue.
    @discardableResult
    package func persist(on connection: Connection) throws -> IdentityRow {
        try adoptNewer(on: connection)
        let row = try current.identity.resolve(on: connection)
        know(row.id)
        return row
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
    /// identity or context changed during the group) are looked at once.
    package func rows(
        for records: some Sequence<(stamps: RecordStamps?, recordedAt: Double)>, on connection: Connection,
        written: inout Written
    ) throws -> CommitStamps {
        written.newestKnown = state.withLock { $0.newestKnown }
        let adopted = try adoptNewer(on: connection)
        var result = CommitStamps()
        var previous: RecordStamps?
        var last: (stamp: IdentityStamp, row: IdentityRow)?
        var lastContext: (stamp: ContextStamp, id: Int64)?
        for (stamps, recordedAt) in records {
            // An adopted identity depends on each record's time.
            if adopted == nil, result.count > 0, stamps === previous {
                result.repeatLast()
                continue
            }
            previous = stamps
            var identity: IdentityRow?
            if var stamp = stamps?.identity {
                if let adopted, stamp === adopted.replaced, recordedAt >= adopted.stamp.createdAt {
                    stamp = adopted.stamp
                }
                if let last, last.stamp === stamp {
                    identity = last.row
                } else {
                    if stamp.row == nil { written.identities.append(stamp) }
                    let row = try stamp.resolve(on: connection)
                    know(row.id)
                    last = (stamp, row)
                    identity = row
                }
            }
            var contextID: Int64?
            if let context = stamps?.context {
                if let lastContext, lastContext.stamp === context {
                    contextID = lastContext.id
                } else {
                    if !context.hasRow { written.contexts.append(context) }
                    let id = try context.resolve(on: connection)
                    lastContext = (context, id)
                    contextID = id
                }
            }
            result.append(identity: identity, contextID: contextID)
        }
        return result
    }

    /// Undoes in memory what a rolled-back commit wrote: its stamps get
    /// their rows again at the next commit, never the ids the rollback freed
    /// (another row may take those).
    package func rolledBack(_ written: Written) {
        for stamp in written.identities { stamp.forgetRow() }
        for context in written.contexts { context.forgetRow() }
        state.withLock { $0.newestKnown = written.newestKnown }
    }

    private func know(_ id: Int64) {
        state.withLock { $0.newestKnown = max($0.newestKnown, id) }
    }

    /// Adopts a row another process wrote after every row this one knows,
    /// unless this process's own current identity is newer.
    @discardableResult
    private func adoptNewer(on connection: Connection) throws -> (replaced: IdentityStamp, stamp: IdentityStamp)? {
        let known = state.withLock { $0.newestKnown }
        guard known > 0, try connection.newestIdentityID() > known, let row = try connection.newestIdentity() else {
            return nil
        }
        return state.withLock { state in
            state.newestKnown = max(state.newestKnown, row.id)
            guard state.identity.createdAt <= row.createdAt else { return nil }
            let replaced = state.identity
            state.identity = IdentityStamp(.row(row), at: row.createdAt)
            return (replaced, state.identity)
        }
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
