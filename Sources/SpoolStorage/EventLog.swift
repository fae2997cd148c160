import Foundation

/// The durable, append-only event log with group commit.
///
/// `append` is O(1) for the caller: it takes a lock, buffers the event and, if
/// the writer is idle, wakes it. The writer runs on the database's serial
/// queue and commits everything buffered in one `BEGIN IMMEDIATE` transaction
/// (up to ``maximumGroupSize`` rows), so under load each transaction and its
/// sync cost is shared by many events, and when idle there is no timer wait.
///
/// The log order is the order appends were accepted. A failed commit (disk
/// full, I/O error) fails the callers awaiting those events and keeps the
/// events buffered, in order, for the next attempt; nothing is dropped.
package final class EventLog: Sendable {
    /// The most rows one transaction commits; the rest wait for the next one.
    package static let maximumGroupSize = 4_096

    package typealias CommitHandler = @Sendable ([CommittedEvent]) -> Void

    private struct Pending {
        let ticket: UInt64
        let id: String
        let record: EventRecord
    }

    private struct Waiter {
        let ticket: UInt64
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var buffer: [Pending] = []
        var nextTicket: UInt64 = 1
        var durableThrough: UInt64 = 0
        var commitScheduled = false
        var waiters: [Waiter] = []
        var consecutiveFailures = 0
        var random = FastRandom()
        var closed = false
        var commitHandler: CommitHandler?
        var maximumRetainedEvents: Int?
        /// Appends the database refused, by ticket (rare; kept so a late
        /// `waitUntilDurable` still gets the error).
        var rejected: [UInt64: SQLiteError] = [:]
    }

    package let database: DatabaseQueue
    private let state = Protected(State())

    package init(database: DatabaseQueue) {
        self.database = database
    }

    /// Bounds the log: when it holds more than `maximum` events, the oldest
    /// give way at the next commit, and each consumer that had not finished
    /// them has its position moved past them and its `dropped` count raised.
    /// `nil` keeps everything until every consumer has finished it.
    package func setMaximumRetainedEvents(_ maximum: Int?) {
        state.withLock { $0.maximumRetainedEvents = maximum }
    }

    /// Called on the database queue after each successful commit, with the
    /// committed events in log order.
    package func setCommitHandler(_ handler: CommitHandler?) {
        state.withLock { $0.commitHandler = handler }
    }

    // MARK: - Appending

    /// Buffers one event for the next group commit and returns at once.
    ///
    /// - Throws: ``StorageError/closed`` after ``close()``.
    @discardableResult
    package func append(_ record: EventRecord) throws -> AppendReceipt {
        let milliseconds = UInt64(max(0, record.recordedAt * 1000))
        let (high, low) = state.withLock { ($0.random.next(), $0.random.next()) }
        // Format outside the lock; take the ticket and buffer under one hold,
        // so the buffer is always in ticket order.
        let id = EventID.make(milliseconds: milliseconds, random: high, low)
        let (ticket, wake) = try state.withLock { state in
            guard !state.closed else { throw StorageError.closed }
            let ticket = state.nextTicket
            state.nextTicket += 1
            state.buffer.append(Pending(ticket: ticket, id: id, record: record))
            let wake = !state.commitScheduled
            state.commitScheduled = true
            return (ticket, wake)
        }
        if wake { scheduleCommit(after: 0) }
        return AppendReceipt(ticket: ticket, id: id)
    }

    /// Returns once every event up to and including `receipt` is committed.
    ///
    /// - Throws: the commit's error if the transaction holding the event
    ///   failed. The event stays buffered and is retried; a later successful
    ///   `waitUntilDurable` proves it landed.
    package func waitUntilDurable(_ receipt: AppendReceipt) async throws {
        try await waitUntilDurable(ticket: receipt.ticket)
    }

    /// Returns once everything appended so far is committed.
    package func waitUntilAllDurable() async throws {
        let last = state.withLock { $0.nextTicket - 1 }
        try await waitUntilDurable(ticket: last)
    }

    private func waitUntilDurable(ticket: UInt64) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let immediate: Result<Void, any Error>? = state.withLock { state in
                if let error = state.rejected[ticket] { return .failure(error) }
                if ticket <= state.durableThrough { return .success(()) }
                state.waiters.append(Waiter(ticket: ticket, continuation: continuation))
                return nil
            }
            if let immediate { continuation.resume(with: immediate) }
        }
    }

    /// How many appends were accepted so far.
    package var acceptedCount: UInt64 { state.withLock { $0.nextTicket - 1 } }

    /// Events accepted but not yet committed.
    package var bufferedCount: Int { state.withLock { $0.buffer.count } }

    // MARK: - The writer

    private func scheduleCommit(after delay: TimeInterval) {
        let body: @Sendable (Connection?) -> Void = { [self] connection in
            guard let connection else { return failAll(StorageError.closed) }
            commitBuffered(connection)
        }
        if delay > 0 { database.asyncAfter(delay, body) } else { database.async(body) }
    }

    /// Commits what is buffered, on the database queue, in transactions of at
    /// most ``maximumGroupSize`` rows.
    ///
    /// A row the database refuses (a constraint, a value too big) must not
    /// hold back the rows around it: the group is then committed row by row,
    /// and only the refused row's callers get the error. Any other failure
    /// (disk full, I/O) keeps everything buffered, in order, for a retry.
    private func commitBuffered(_ connection: Connection) {
        // Take the whole buffer in O(1); appenders start a fresh one.
        let staged: [Pending] = state.withLock { state in
            var staged: [Pending] = []
            swap(&staged, &state.buffer)
            return staged
        }
        var start = staged.startIndex
        while start < staged.endIndex {
            let group = staged[start..<min(staged.endIndex, start + Self.maximumGroupSize)]
            do {
                do {
                    try commit(group, connection)
                } catch let error as SQLiteError where error.isRowSpecific {
                    for index in group.indices {
                        start = index
                        do {
                            try commit(staged[index...index], connection)
                        } catch let error as SQLiteError where error.isRowSpecific {
                            reject(staged[index], error)
                        }
                    }
                }
                start = group.endIndex
            } catch {
                let last = group[group.endIndex - 1].ticket
                let failed = state.withLock { state in
                    // Back at the front, in the same order, for the next attempt.
                    state.buffer.insert(contentsOf: staged[start...], at: 0)
                    state.consecutiveFailures += 1
                    return takeWaiters(through: last, from: &state)
                }
                for waiter in failed { waiter.continuation.resume(throwing: error) }
                rescheduleIfNeeded(afterFailure: true)
                return
            }
        }
        rescheduleIfNeeded(afterFailure: false)
    }

    /// Writes one group in one transaction and tells the handler and the
    /// waiters.
    private func commit(_ group: ArraySlice<Pending>, _ connection: Connection) throws {
        let committed = try write(group, connection)
        let last = group[group.endIndex - 1].ticket
        let (ready, handler) = state.withLock { state in
            state.durableThrough = last
            state.consecutiveFailures = 0
            return (takeWaiters(through: last, from: &state), state.commitHandler)
        }
        // The handler first: once a caller sees its event durable, the event
        // is already on its way to listeners.
        if let handler { handler(committed()) }
        for waiter in ready { waiter.continuation.resume() }
    }

    /// Drops one row the database refused: its callers get `error`, and the
    /// log moves on.
    private func reject(_ pending: Pending, _ error: SQLiteError) {
        let failed = state.withLock { state in
            state.rejected[pending.ticket] = error
            state.durableThrough = max(state.durableThrough, pending.ticket)
            return takeWaiters(through: pending.ticket, from: &state)
        }
        for waiter in failed { waiter.continuation.resume(throwing: error) }
    }

    private func takeWaiters(through ticket: UInt64, from state: inout State) -> [Waiter] {
        guard state.waiters.contains(where: { $0.ticket <= ticket }) else { return [] }
        let ready = state.waiters.filter { $0.ticket <= ticket }
        state.waiters.removeAll { $0.ticket <= ticket }
        return ready
    }

    private func rescheduleIfNeeded(afterFailure: Bool) {
        let delay: TimeInterval? = state.withLock { state in
            if state.buffer.isEmpty {
                state.commitScheduled = false
                return nil
            }
            guard afterFailure else { return 0 }
            // 50 ms, doubling, at most 5 s between attempts.
            return min(5, 0.05 * pow(2, Double(min(state.consecutiveFailures - 1, 10))))
        }
        if let delay { scheduleCommit(after: delay) }
    }

    /// Inserts one group in one transaction and returns a builder for the
    /// committed rows (only called when someone listens).
    private func write(_ group: ArraySlice<Pending>, _ connection: Connection) throws -> () -> [CommittedEvent] {
        let maximumRetained = state.withLock { $0.maximumRetainedEvents }
        var firstSeq: Int64 = 0
        #if !DEBUG
            // The schema's CHECKs (json_valid, priority in 0/1) guard every other
            // writer of the file. Spool's own rows are valid by construction (the
            // encoder's fuzz test asserts json_valid on what it writes), and
            // json_valid alone costs about a quarter of the insert, so release
            // builds skip evaluating them for this one statement's transaction.
            // Debug builds (the test suite) keep them on as a tripwire.
            try connection.execute("PRAGMA ignore_check_constraints = ON")
            defer { try? connection.execute("PRAGMA ignore_check_constraints = OFF") }
        #endif
        try connection.transaction {
            // Read inside the transaction, so another process sharing the file
            // (an app extension) cannot be handed the same positions.
            var seq = try connection.headPosition()
            firstSeq = seq + 1
            let insert = try connection.cachedStatement(
                """
                INSERT INTO events (seq, id, name, parameters, recorded_at, session_id, priority) \
                VALUES (?, ?, ?, ?, ?, ?, ?)
                """)
            defer { insert.reset() }
            var historyCount = 0
            for pending in group {
                let record = pending.record
                seq += 1
                try insert.bind(seq, at: 1)
                try insert.bind(pending.id, at: 2)
                try insert.bind(record.name, at: 3)
                try insert.bind(record.parametersJSON, at: 4)
                try insert.bind(record.recordedAt, at: 5)
                try insert.bind(record.sessionID, at: 6)
                try insert.bind(record.priority, at: 7)
                try insert.step()
                insert.resetKeepingBindings()
                if record.addsToHistory { historyCount += 1 }
            }
            try connection.withStatement("UPDATE log_head SET last_seq = ? WHERE id = 1") { head in
                try head.bind(seq, at: 1)
                try head.step()
            }
            if let maximumRetained { try connection.enforceRetention(maximum: maximumRetained, head: seq) }
            if historyCount > 0 {
                try connection.withStatement("INSERT INTO event_history (name, recorded_at) VALUES (?, ?)") { history in
                    for pending in group where pending.record.addsToHistory {
                        try history.bind(pending.record.name, at: 1)
                        try history.bind(pending.record.recordedAt, at: 2)
                        try history.step()
                        history.resetKeepingBindings()
                    }
                }
            }
        }
        return {
            var seq = firstSeq
            return group.map { pending in
                defer { seq += 1 }
                let record = pending.record
                return CommittedEvent(
                    stored: StoredEvent(
                        seq: seq, id: pending.id, name: record.name, parametersJSON: record.parametersJSON,
                        recordedAt: record.recordedAt, sessionID: record.sessionID, priority: record.priority),
                    attachment: record.attachment)
            }
        }
    }

    private func failAll(_ error: any Error) {
        let waiters = state.withLock { state in
            defer { state.waiters.removeAll() }
            state.commitScheduled = false
            return state.waiters
        }
        for waiter in waiters { waiter.continuation.resume(throwing: error) }
    }

    // MARK: - Closing

    /// Stops accepting appends and waits until everything buffered is
    /// committed.
    ///
    /// - Throws: the last commit error if the buffer could not be committed;
    ///   the events remain buffered only in memory and are lost when the
    ///   process ends, so callers should report it.
    package func close() async throws {
        let last = state.withLock { state in
            state.closed = true
            return state.nextTicket - 1
        }
        try await waitUntilDurable(ticket: last)
    }
}
