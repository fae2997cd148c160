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
/// full, I/O error) keeps the events buffered, in order, for the next attempt
/// (with backoff); their waiters learn it with
/// ``StorageError/notYetCommitted(_:)`` — the event is *not* lost and must not
/// be appended again. While commits keep failing the buffer is bounded:
/// appends past ``Limits`` are refused with ``StorageError/bufferFull(events:bytes:)``.
package final class EventLog: Sendable {
    /// The most rows one transaction commits; the rest wait for the next one.
    package static let maximumGroupSize = 4_096

    package typealias CommitHandler = @Sendable (_ events: [CommittedEvent], _ head: Int64) -> Void

    /// How much may wait for the writer.
    package struct Limits: Sendable, Hashable {
        package var events: Int
        /// Parameter JSON and name bytes.
        package var bytes: Int

        package init(events: Int, bytes: Int) {
            self.events = max(1, events)
            self.bytes = max(1, bytes)
        }
    }

    /// What the log could not tell a caller directly.
    package enum Failure: Sendable {
        /// A commit failed; `buffered` events wait for the next attempt.
        case commitFailed(any Error, buffered: Int)
        /// Commits succeed again after `failures` failed attempts.
        case commitRecovered(failures: Int)
        /// The database refused one row (a constraint, a value too big): it
        /// will never be stored.
        case rowRejected(SQLiteError)
        /// An append was refused: the buffer is at its bound while commits fail.
        case appendRefused
    }

    struct Pending {
        let ticket: UInt64
        let id: String
        let record: EventRecord
    }

    struct Waiter {
        let ticket: UInt64
        let continuation: CheckedContinuation<Void, any Error>
    }

    struct State {
        var buffer: [Pending] = []
        var bufferedBytes = 0
        var limits: Limits
        var nextTicket: UInt64 = 1
        var durableThrough: UInt64 = 0
        var commitScheduled = false
        var waiters: [Waiter] = []
        var consecutiveFailures = 0
        var lastFailure: (any Error)?
        var random = FastRandom()
        var closed = false
        var commitHandler: CommitHandler?
        var failureHandler: (@Sendable (Failure) -> Void)?
        var maximumRetainedEvents: Int?
        /// Appends the database refused, by ticket (rare; kept so a late
        /// `waitUntilDurable` still gets the error).
        var rejected: [UInt64: SQLiteError] = [:]
    }

    package let database: DatabaseQueue
    let state: Protected<State>

    package init(database: DatabaseQueue, limits: Limits = Limits(events: 50_000, bytes: 16 << 20)) {
        self.database = database
        state = Protected(State(limits: limits))
    }

    /// Bounds the log: when it holds more than `maximum` events, the oldest
    /// give way at the next commit, and each consumer that had not finished
    /// them has its position moved past them and its `dropped` count raised.
    /// `nil` keeps everything until every consumer has finished it.
    package func setMaximumRetainedEvents(_ maximum: Int?) {
        state.withLock { $0.maximumRetainedEvents = maximum.map { max(1, $0) } }
    }

    /// Called on the database queue after each successful commit, with the
    /// committed events in log order and the log's head after it. Set nil to
    /// let go of whatever the handler holds.
    package func setCommitHandler(_ handler: CommitHandler?) {
        state.withLock { $0.commitHandler = handler }
    }

    /// Told, on whatever thread noticed, what no caller could be told.
    package func setFailureHandler(_ handler: (@Sendable (Failure) -> Void)?) {
        state.withLock { $0.failureHandler = handler }
    }

    // MARK: - Appending

    /// Buffers one event for the next group commit and returns at once.
    ///
    /// - Throws: ``StorageError/closed`` after ``close()``;
    ///   ``StorageError/bufferFull(events:bytes:)`` when the buffer is at its
    ///   bound and commits are failing (the event was not accepted).
    @discardableResult
    package func append(_ record: EventRecord) throws -> AppendReceipt {
        let milliseconds = EventID.milliseconds(since1970: record.recordedAt)
        let bytes = record.parametersJSON.utf8.count + record.name.utf8.count
        let (high, low) = state.withLock { ($0.random.next(), $0.random.next()) }
        // Format outside the lock; take the ticket and buffer under one hold,
        // so the buffer is always in ticket order.
        let id = EventID.make(milliseconds: milliseconds, random: high, low)
        let (ticket, wake, refused) = try state.withLock { state -> (UInt64, Bool, (@Sendable (Failure) -> Void)?) in
            guard !state.closed else { throw StorageError.closed }
            if state.consecutiveFailures > 0
                && (state.buffer.count >= state.limits.events || state.bufferedBytes + bytes > state.limits.bytes)
            {
                return (0, false, state.failureHandler ?? { _ in })
            }
            let ticket = state.nextTicket
            state.nextTicket += 1
            state.buffer.append(Pending(ticket: ticket, id: id, record: record))
            state.bufferedBytes += bytes
            let wake = !state.commitScheduled
            state.commitScheduled = true
            return (ticket, wake, nil)
        }
        if let refused {
            refused(.appendRefused)
            let (events, bytes) = state.withLock { ($0.buffer.count, $0.bufferedBytes) }
            throw StorageError.bufferFull(events: events, bytes: bytes)
        }
        if wake { scheduleCommit(after: 0) }
        return AppendReceipt(ticket: ticket, id: id)
    }

    /// Returns once every event up to and including `receipt` is committed.
    ///
    /// - Throws: ``StorageError/notYetCommitted(_:)`` when the commit holding
    ///   the event failed: it stays buffered and is retried (a later
    ///   successful wait proves it landed); the row's ``SQLiteError`` when the
    ///   database refused that row for good; ``StorageError/closed`` when the
    ///   log closed before it could be committed.
    package func waitUntilDurable(_ receipt: AppendReceipt) async throws {
        try await waitUntilDurable(ticket: receipt.ticket)
    }

    /// Returns once everything appended so far is committed.
    package func waitUntilAllDurable() async throws {
        let last = state.withLock { $0.nextTicket - 1 }
        try await waitUntilDurable(ticket: last)
    }

    func waitUntilDurable(ticket: UInt64) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let immediate: Result<Void, any Error>? = state.withLock { state in
                if let error = state.rejected[ticket] { return .failure(error) }
                if ticket <= state.durableThrough { return .success(()) }
                if state.closed && !state.commitScheduled { return .failure(StorageError.closed) }
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

    /// Bytes (parameter JSON and names) accepted but not yet committed.
    package var bufferedBytes: Int { state.withLock { $0.bufferedBytes } }

    // MARK: - Closing

    /// What ``close()`` could not do.
    package struct CloseReport: Sendable {
        /// Events still buffered when the database had to close: they are
        /// lost when the process ends.
        package var uncommitted: Int
        /// Why the last commit failed.
        package var error: (any Error)?
    }

    /// Stops accepting appends, makes one more commit attempt at once (even
    /// while backing off) and waits for it.
    ///
    /// - Returns: what could not be committed, if anything.
    @discardableResult
    package func close() async -> CloseReport {
        let last = state.withLock { state in
            state.closed = true
            return state.nextTicket - 1
        }
        // One attempt now rather than after the failure backoff.
        database.async { [self] connection in
            guard let connection else { return failAll(StorageError.closed) }
            commitBuffered(connection)
        }
        do {
            try await waitUntilDurable(ticket: last)
            return CloseReport(uncommitted: 0, error: nil)
        } catch {
            let uncommitted = state.withLock { $0.buffer.count }
            return CloseReport(uncommitted: uncommitted, error: error)
        }
    }
}
