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
/// be appended again.
///
/// What waits for the writer is bounded (``Limits``). Past the bound an
/// appender waits for the writer to take the buffer (it swaps it out at the
/// start of each commit), at most ``maximumWaitForRoom``; while commits keep
/// failing it is refused at once with ``StorageError/bufferFull(events:bytes:)``.
/// Code on the database queue itself never waits (the writer runs there).
package final class EventLog: Sendable {
    /// The most rows one transaction commits; the rest wait for the next one.
    package static let maximumGroupSize = 4_096

    /// How long after a drain (or after the WAL grew) the file gives space
    /// back, unless ``shrinkDelay`` says otherwise.
    package static let defaultShrinkDelay: TimeInterval = 5

    /// The longest an appender waits for room in the buffer before it is
    /// refused: the writer normally makes room within one commit (a few ms).
    package static let maximumWaitForRoom: TimeInterval = 2

    /// Called on the database queue after each commit with the number of
    /// events committed, the log's head after it, a builder for the
    /// committed rows (call it only if someone needs them: it allocates), and
    /// what the ``GroupReader`` found in the group's transaction.
    package typealias CommitHandler =
        @Sendable (_ count: Int, _ head: Int64, _ events: () -> [StoredEvent], _ reading: (any Sendable)?) -> Void

    /// Called inside each group's transaction, after its rows are written
    /// and before it commits, with a builder for those rows: reads that must
    /// see the log exactly as this group leaves it — no later group, and no
    /// other process's commit, can come in between (survey conditions at
    /// each event). Return nil when there is nothing to read (without
    /// calling the builder). It must not write, and handles its own errors:
    /// the group commits whatever it returns.
    package typealias GroupReader =
        @Sendable (_ events: () -> [StoredEvent], _ connection: Connection) -> (any Sendable)?

    /// How much may wait for the writer.
    package struct Limits: Sendable, Hashable {
        package var events: Int
        /// Parameter JSON and name bytes.
        package var bytes: Int

        package init(events: Int, bytes: Int) {
            self.events = max(1, events)
            self.bytes = max(1, bytes)
        }

        /// Two commit groups (8,192 events) or 1 MiB (about 3,500 events of
        /// ten parameters, most of a commit group): the writer never waits
        /// for work, and a burst of any size holds a few megabytes. Doubling
        /// the byte bound commits no faster and holds about 3 MB more at a
        /// burst's peak (spool-bench's burst rows).
        package static let standard = Limits(events: 8_192, bytes: 1 << 20)
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
        /// An append was refused: the buffer is at its bound while commits
        /// fail, or the writer made no room within ``maximumWaitForRoom``.
        case appendRefused
        /// Giving space back after a drain failed; the file stays larger.
        case shrinkFailed(any Error)
        /// The queue's bounds dropped events no consumer had finished (the
        /// oldest), by bound.
        case eventsDropped(QueueDrops)
    }

    /// One buffered event: the record and the random half of its id (the
    /// writer formats the id again for the row, so the buffer holds no id
    /// string).
    struct Pending {
        let ticket: UInt64
        let random: (high: UInt64, low: UInt64)
        let record: EventRecord

        var milliseconds: UInt64 { EventID.milliseconds(since1970: record.recordedAt) }
        var id: String { Self.id(recordedAt: record.recordedAt, random: random) }

        static func id(recordedAt: Double, random: (high: UInt64, low: UInt64)) -> String {
            EventID.make(milliseconds: EventID.milliseconds(since1970: recordedAt), random: random.high, random.low)
        }
    }

    /// The write buffer, with what a durability wait and a position wait
    /// leave behind.
    typealias Buffer = WriteBuffer<
        CheckedContinuation<Void, any Error>, @Sendable (Result<Int64, any Error>) -> Void
    >

    struct State {
        /// The buffer's rules; everything else here is configuration,
        /// handlers and measurements.
        var buffer: Buffer
        var commitHandler: CommitHandler?
        var groupReader: GroupReader?
        var failureHandler: (@Sendable (Failure) -> Void)?
        var queueBounds = QueueBounds()
        /// What the writer stamps each event's clock with (``Launch``).
        var launch: Launch?
        var historyLimits: HistoryLimits?
        /// History rows written since the history was last pruned.
        var historySincePrune = 0
        /// CPU time the writer's thread spent in commits, and the events
        /// they committed (what spool-bench compares with the caller's).
        var writerCPU: (nanoseconds: UInt64, events: Int) = (0, 0)
        /// Whether a timer waits to give the file's space back.
        var shrinkScheduled = false
        var shrinkDelay = EventLog.defaultShrinkDelay
    }

    package let database: DatabaseQueue
    /// Where each event's identity and context rows come from at its commit;
    /// nil: events are stored without them.
    package let identities: IdentityBook?
    let state: Protected<State>

    package init(database: DatabaseQueue, limits: Limits = .standard, identities: IdentityBook? = nil) {
        self.database = database
        self.identities = identities
        state = Protected(State(buffer: Buffer(limits: limits)))
    }

    /// Bounds the log: when it holds more than `maximum` events, the oldest
    /// give way at the next commit, and each consumer that had not finished
    /// them has its position moved past them and its `dropped` count raised.
    /// `nil` keeps everything until every consumer has finished it.
    package func setMaximumRetainedEvents(_ maximum: Int?) {
        state.withLock { $0.queueBounds.count = maximum.map { max(1, $0) } }
    }

    /// Bounds the log by count, bytes and age: the oldest events give way at
    /// the next commit past any of them, as ``setMaximumRetainedEvents(_:)``
    /// says, and each bound's drops are counted and reported.
    package func setQueueBounds(_ bounds: QueueBounds) {
        state.withLock { $0.queueBounds = bounds }
    }

    /// How much event history to keep (survey rules count it).
    package struct HistoryLimits: Sendable, Hashable {
        /// Rows older than this many seconds go.
        package var maximumAge: Double?
        /// Past this many rows the oldest go.
        package var maximumRows: Int?
        /// Past this many rows of kept property values the oldest go.
        package var maximumValueRows: Int?

        /// Limits for both tables; `maximumValueRows` nil: `maximumRows`.
        package init(maximumAge: Double?, maximumRows: Int?, maximumValueRows: Int? = nil) {
            self.maximumAge = maximumAge
            self.maximumRows = maximumRows
            self.maximumValueRows = maximumValueRows ?? maximumRows
        }
    }

    /// Prunes the history in the writer, after every 1,024 history rows, by
    /// `limits` (nil keeps everything).
    package func setHistoryLimits(_ limits: HistoryLimits?) {
        state.withLock { $0.historyLimits = limits }
    }

    /// Called on the database queue after each successful commit (see
    /// ``CommitHandler``). Set nil to let go of whatever the handler holds.
    package func setCommitHandler(_ handler: CommitHandler?) {
        state.withLock { $0.commitHandler = handler }
    }

    /// Reads inside each group's transaction (see ``GroupReader``). Set nil
    /// to let go of whatever the reader holds.
    package func setGroupReader(_ reader: GroupReader?) {
        state.withLock { $0.groupReader = reader }
    }

    /// Told, on whatever thread noticed, what no caller could be told.
    package func setFailureHandler(_ handler: (@Sendable (Failure) -> Void)?) {
        state.withLock { $0.failureHandler = handler }
    }

    // MARK: - Appending

    /// Buffers one event for the next group commit, waiting for room first
    /// when the buffer is at its bound (see the type's documentation).
    ///
    /// - Throws: ``StorageError/closed`` after ``close()``;
    ///   ``StorageError/bufferFull(events:bytes:)`` when the buffer is at its
    ///   bound and commits are failing, or the writer made no room in
    ///   ``maximumWaitForRoom`` (the event was not accepted).
    @discardableResult
    package func append(_ record: consuming EventRecord) throws -> AppendReceipt {
        let bytes = record.bufferedBytes
        var record: EventRecord? = record
        while true {
            if let receipt = try tryAppend(&record) { return receipt }
            try waitForRoom(bytes: bytes)
        }
    }

    /// Buffers one event unless the buffer is at its bound and the caller
    /// should wait for room first (``waitForRoom(bytes:)``, then try again):
    /// that is nil. For callers holding a lock of their own, which must not
    /// wait under it. Returns at once.
    ///
    /// A buffered `record` is moved into the buffer, not copied: it is nil
    /// afterwards, and still there when this returns nil or throws.
    ///
    /// - Throws: ``StorageError/closed`` after ``close()``;
    ///   ``StorageError/bufferFull(events:bytes:)`` when the buffer is at its
    ///   bound and commits are failing.
    package func tryAppend(_ record: inout EventRecord?) throws -> AppendReceipt? {
        try buffer(&record, pastBound: false)
    }

    /// Buffers one event even past the bound, never waiting: for the few
    /// events appended under a lock (`session_start` and the events that
    /// waited for it). Still refused while commits fail.
    ///
    /// - Throws: as ``tryAppend(_:)``.
    @discardableResult
    package func appendPastBound(_ record: consuming EventRecord) throws -> AppendReceipt {
        // Past the bound is never "wait for room", so nil cannot come back.
        var record: EventRecord? = record
        guard let receipt = try buffer(&record, pastBound: true) else {
            throw StorageError.bufferFull(events: bufferedCount, bytes: bufferedBytes)
        }
        return receipt
    }

    /// ``tryAppend(_:)``, or with `pastBound` ``appendPastBound(_:)``.
    private func buffer(_ record: inout EventRecord?, pastBound: Bool) throws -> AppendReceipt? {
        guard let (bytes, recordedAt) = record.map({ ($0.bufferedBytes, $0.recordedAt) }) else {
            preconditionFailure("buffer(_:pastBound:) needs an event")
        }
        let (action, handler) = state.withLock { state -> (Buffer.Append, (@Sendable (Failure) -> Void)?) in
            // The writer runs on the database queue: code there (a custom
            // dispatcher recording from its callback) cannot wait for it.
            let action = state.buffer.append(&record, bytes: bytes, mayWait: !pastBound && !database.isCurrent)
            guard case .refused = action else { return (action, nil) }
            return (action, state.failureHandler)
        }
        switch action {
        case .taken(let ticket, let random, let startWriter):
            if startWriter { scheduleCommit(after: 0) }
            return AppendReceipt(ticket: ticket, id: Pending.id(recordedAt: recordedAt, random: random))
        case .waitForRoom:
            return nil
        case .refused(let events, let bytes):
            handler?(.appendRefused)
            throw StorageError.bufferFull(events: events, bytes: bytes)
        case .closed:
            throw StorageError.closed
        }
    }

    /// Waits until an event of `bytes` (its
    /// ``EventRecord/bufferedBytes``) fits in the buffer, at most
    /// ``maximumWaitForRoom``.
    ///
    /// - Throws: ``StorageError/bufferFull(events:bytes:)`` when commits are
    ///   failing or no room came in time; ``StorageError/closed``.
    package func waitForRoom(bytes needed: Int) throws {
        state.withLock { $0.buffer.startWaitingForRoom() }
        // clock-exempt: a real deadline, the caller's thread is blocked and the OS wakes it.
        let found = state.wait(until: Date().addingTimeInterval(Self.maximumWaitForRoom)) { state in
            state.buffer.waitForRoomIsOver(for: needed)
        }
        let (room, handler) = state.withLock { ($0.buffer.stopWaitingForRoom(found: found), $0.failureHandler) }
        switch room {
        case .room: return
        case .closed: throw StorageError.closed
        case .refused(let events, let bytes):
            handler?(.appendRefused)
            throw StorageError.bufferFull(events: events, bytes: bytes)
        }
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
        try await waitUntilDurable(ticket: state.withLock { $0.buffer.lastTicket })
    }

    func waitUntilDurable(ticket: UInt64) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let immediate = state.withLock { $0.buffer.waitUntilSettled(ticket, continuation) }
            if let immediate { continuation.resume(with: immediate) }
        }
    }

    /// Calls `completion` with the log position of the last event appended
    /// before this call, once it is committed: "everything recorded so far"
    /// as a position (events appended later, here or by another process,
    /// come after it). Which event is "the last" is settled now, so a
    /// synchronous caller can pin it under a lock of its own.
    ///
    /// A failed commit does not end the wait: the event keeps its place and
    /// the answer comes when a later attempt commits it. When the log closes
    /// first, `completion` gets ``StorageError/closed``.
    package func positionOfLastAppended(_ completion: @escaping @Sendable (Result<Int64, any Error>) -> Void) {
        let immediate = state.withLock { $0.buffer.positionOfLastAppended(completion) }
        if let immediate { completion(.success(immediate)) }
    }

    /// How many appends were accepted so far.
    package var acceptedCount: UInt64 { state.withLock { $0.buffer.lastTicket } }

    /// Events accepted but not yet committed.
    package var bufferedCount: Int { state.withLock { $0.buffer.pending.count } }

    /// Bytes (parameter JSON and names) accepted but not yet committed.
    package var bufferedBytes: Int { state.withLock { $0.buffer.pendingBytes } }

    /// How many times an appender found the buffer at its bound and waited
    /// for the writer: zero while the writer keeps up.
    package var waitsForRoom: Int { state.withLock { $0.buffer.waitsForRoom } }

    /// The writer's thread CPU time per committed event so far, in
    /// nanoseconds (nil before the first commit).
    package var writerCPUPerEvent: Double? {
        state.withLock { state in
            state.writerCPU.events == 0 ? nil : Double(state.writerCPU.nanoseconds) / Double(state.writerCPU.events)
        }
    }

    /// Drops every event not yet committed: their waiters get `reason`.
    /// For erasure on a full disk, where they must never reach the file
    /// (see ``WriteBuffer/discardAll(because:)`` for a group the writer
    /// holds meanwhile).
    package func discardBuffered(because reason: any Error) {
        let settled = state.withLock { $0.buffer.discardAll(because: reason) }
        state.broadcast()
        for waiter in settled.waiters { waiter.resume(throwing: reason) }
        for (waiter, position) in settled.positions { waiter(.success(position)) }
    }

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
        let last = state.withLock { $0.buffer.close() }
        // One attempt now rather than after the failure backoff.
        database.async { [self] connection in
            guard let connection else { return failAll(StorageError.closed) }
            commitBuffered(connection)
        }
        do {
            try await waitUntilDurable(ticket: last)
            return CloseReport(uncommitted: 0, error: nil)
        } catch {
            let uncommitted = state.withLock { $0.buffer.pending.count }
            return CloseReport(uncommitted: uncommitted, error: error)
        }
    }
}
