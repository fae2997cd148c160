import Foundation

/// The write buffer's rules, as a value: the events waiting for the writer,
/// the tickets that order them, who waits for which ticket, and what a
/// failed commit, a refused row or a discard does to them.
///
/// Each method changes the value and returns what its caller
/// (``EventLog``, under its lock) must do next — start the writer, resume
/// waiters, report a failure, schedule the next attempt. Nothing here blocks,
/// calls out or touches a database, so the rules are tested without SQLite,
/// threads or time (`WriteBufferTests`).
///
/// Every accepted event gets the next ticket. ``settledThrough`` only moves
/// forward: every ticket up to it is committed, refused by the database, or
/// discarded. A refused or discarded ticket keeps its error, so a late wait
/// still learns why.
///
/// `Waiter` is what a caller waiting for durability leaves behind (a
/// continuation); `PositionWaiter` is what a caller waiting for the position
/// of the last appended event leaves behind (a completion).
struct WriteBuffer<Waiter, PositionWaiter> {
    typealias Pending = EventLog.Pending

    let limits: EventLog.Limits
    /// Accepted and not yet taken by the writer, in ticket order.
    private(set) var pending: [Pending] = []
    /// What `pending` counts against the byte bound.
    private(set) var pendingBytes = 0
    private(set) var nextTicket: UInt64 = 1
    /// Every ticket up to this one is settled.
    private(set) var settledThrough: UInt64 = 0
    /// The log's head after the last commit: the position of the last
    /// event committed.
    private(set) var lastCommittedHead: Int64 = 0
    /// Tickets up to this one were discarded: a group the writer held when
    /// they were, if its commit fails, is dropped rather than retried.
    private(set) var discardedThrough: UInt64 = 0
    /// A writer pass is scheduled or running.
    private(set) var writerScheduled = false
    /// Failed commit attempts since the last successful one.
    private(set) var consecutiveFailures = 0
    private(set) var closed = false
    /// Appenders waiting for room now.
    private(set) var waitingForRoom = 0
    /// Times an appender found the buffer at its bound and waited.
    private(set) var waitsForRoom = 0
    private var waiters: [(ticket: UInt64, waiter: Waiter)] = []
    private var positionWaiters: [(ticket: UInt64, waiter: PositionWaiter)] = []
    /// Tickets that will never be stored, and why (rare).
    private var refusals: [UInt64: any Error] = [:]
    private var random: FastRandom

    init(limits: EventLog.Limits, random: FastRandom = FastRandom()) {
        self.limits = limits
        self.random = random
    }

    /// The last ticket handed out (0 before any).
    var lastTicket: UInt64 { nextTicket - 1 }

    /// Whether an event of `bytes` fits under both bounds. An empty buffer
    /// always has room: an event larger than the byte bound is taken alone
    /// rather than never.
    func hasRoom(for bytes: Int) -> Bool {
        pending.isEmpty || (pending.count < limits.events && pendingBytes + bytes <= limits.bytes)
    }

    // MARK: - Appending

    enum Append {
        /// Buffered, with its ticket and id bits (not the whole copy: one
        /// fewer copy of every record); start the writer when it is not
        /// scheduled yet.
        case taken(ticket: UInt64, random: (high: UInt64, low: UInt64), startWriter: Bool)
        /// At the bound: wait for room, then append again.
        case waitForRoom
        /// At the bound while commits fail: refuse the event.
        case refused(events: Int, bytes: Int)
        case closed
    }

    /// Takes `record` (counting `bytes` against the bound) unless the
    /// buffer is at its bound: then an appender that `mayWait` is told to
    /// wait for room, one that may not is taken past the bound, and while
    /// commits fail every appender is refused.
    ///
    /// A taken record is moved out of `record` (nil afterwards): buffering
    /// an event retains none of its strings again.
    @inline(__always)
    mutating func append(_ record: inout EventRecord?, bytes: Int, mayWait: @autoclosure () -> Bool) -> Append {
        guard !closed else { return .closed }
        if !hasRoom(for: bytes) {
            if consecutiveFailures > 0 { return .refused(events: pending.count, bytes: pendingBytes) }
            if mayWait() { return .waitForRoom }
        }
        guard let moved = record.take() else { preconditionFailure("append(_:) needs an event") }
        let ticket = nextTicket
        let random = (high: random.next(), low: random.next())
        nextTicket += 1
        pending.append(Pending(ticket: ticket, random: random, record: moved))
        pendingBytes += bytes
        defer { writerScheduled = true }
        return .taken(ticket: ticket, random: random, startWriter: !writerScheduled)
    }

    enum Room {
        case room
        case closed
        /// Commits are failing, or no room came in time.
        case refused(events: Int, bytes: Int)
    }

    /// An appender starts waiting for room.
    mutating func startWaitingForRoom() {
        waitingForRoom += 1
        waitsForRoom += 1
    }

    /// Whether a wait for room of `bytes` is over: room, a failing commit
    /// or the log closing ends it.
    func waitForRoomIsOver(for bytes: Int) -> Bool {
        closed || consecutiveFailures > 0 || hasRoom(for: bytes)
    }

    /// An appender stops waiting; `found` says whether its wait ended in
    /// time.
    mutating func stopWaitingForRoom(found: Bool) -> Room {
        waitingForRoom -= 1
        if closed { return .closed }
        if !found || consecutiveFailures > 0 { return .refused(events: pending.count, bytes: pendingBytes) }
        return .room
    }

    // MARK: - Waiting

    /// The outcome for `ticket` if it is settled (or can never be); nil
    /// when `waiter` is kept until it is.
    mutating func waitUntilSettled(_ ticket: UInt64, _ waiter: Waiter) -> Result<Void, any Error>? {
        if let error = refusals[ticket] { return .failure(error) }
        if ticket <= settledThrough { return .success(()) }
        if closed && !writerScheduled { return .failure(StorageError.closed) }
        waiters.append((ticket, waiter))
        return nil
    }

    /// The position of the last event appended so far if it is settled
    /// (a refused or discarded one stands at the last committed position);
    /// nil when `waiter` is kept until it is.
    mutating func positionOfLastAppended(_ waiter: PositionWaiter) -> Int64? {
        let ticket = lastTicket
        if ticket <= settledThrough { return lastCommittedHead }
        positionWaiters.append((ticket, waiter))
        return nil
    }

    // MARK: - The writer

    /// The writer takes everything pending, in O(1); appenders start a
    /// fresh buffer. Wake the appenders waiting for room when
    /// `wakeRoomWaiters`.
    mutating func takeForCommit() -> (group: [Pending], wakeRoomWaiters: Bool) {
        var taken: [Pending] = []
        swap(&taken, &pending)
        pendingBytes = 0
        return (taken, waitingForRoom > 0)
    }

    /// Who to tell what once tickets settle.
    struct Settled {
        var waiters: [Waiter] = []
        /// Each with the position to answer.
        var positions: [(waiter: PositionWaiter, position: Int64)] = []
        /// Failed attempts before this commit (0: nothing to recover from).
        var recoveredAfter = 0
    }

    /// A group whose last ticket is `last` committed; the log's head is now
    /// `head`. Its waiters resume; position waiters learn their event's
    /// position (a group's tickets, like its positions, are consecutive).
    mutating func committed(through last: UInt64, head: Int64) -> Settled {
        settledThrough = max(settledThrough, last)
        lastCommittedHead = head
        let positions = takePositionWaiters(through: last).map { ($0.waiter, head - Int64(last - $0.ticket)) }
        defer { consecutiveFailures = 0 }
        return Settled(waiters: takeWaiters(through: last), positions: positions, recoveredAfter: consecutiveFailures)
    }

    /// The database refused `ticket`'s row for good: its waiters fail with
    /// `error` (now and later), and, having no position, it stands at the
    /// last committed one.
    mutating func refused(_ ticket: UInt64, because error: any Error) -> Settled {
        refusals[ticket] = error
        settledThrough = max(settledThrough, ticket)
        return Settled(
            waiters: takeWaiters(through: ticket),
            positions: takePositionWaiters(through: ticket).map { ($0.waiter, lastCommittedHead) })
    }

    /// A commit failed with `remaining` (what the writer still held) not
    /// committed. It goes back to the front, in order, except what was
    /// discarded meanwhile (dropped: it must never reach the file). Its
    /// waiters fail, to be told it is not committed yet; position waiters
    /// stay for the attempt that commits it.
    ///
    /// - Returns: the waiters, and how many events are buffered now.
    mutating func failed(keeping remaining: ArraySlice<Pending>) -> (waiters: [Waiter], buffered: Int) {
        let kept = remaining.drop(while: { $0.ticket <= discardedThrough })
        pending.insert(contentsOf: kept, at: 0)
        pendingBytes += kept.reduce(0) { $0 + $1.record.bufferedBytes }
        consecutiveFailures += 1
        return (takeWaiters(through: remaining.last?.ticket ?? 0), pending.count)
    }

    /// A writer pass ended. Events still pending get another pass at once,
    /// or after a failure 50 ms later, doubling to 5 s between attempts;
    /// with none the writer goes idle (nil).
    mutating func passEnded(afterFailure: Bool) -> TimeInterval? {
        guard !pending.isEmpty else {
            writerScheduled = false
            return nil
        }
        guard afterFailure else { return 0 }
        return min(5, 0.05 * pow(2, Double(min(max(consecutiveFailures, 1) - 1, 10))))
    }

    // MARK: - Discarding and closing

    /// Drops every event not yet committed, for erasure on a full disk:
    /// those pending now, and those the writer holds, which if their
    /// commit fails are dropped rather than retried (if it succeeds, the
    /// erasure that follows on the writer's queue deletes them). Their
    /// waiters fail with `reason`, now and later; position waiters stand
    /// at the last committed position.
    mutating func discardAll(because reason: any Error) -> Settled {
        pending.removeAll()
        pendingBytes = 0
        let last = lastTicket
        guard last > settledThrough else { return Settled() }
        for ticket in (settledThrough + 1)...last where refusals[ticket] == nil { refusals[ticket] = reason }
        discardedThrough = last
        settledThrough = last
        return Settled(
            waiters: takeWaiters(through: last),
            positions: takePositionWaiters(through: last).map { ($0.waiter, lastCommittedHead) })
    }

    /// Takes no more events. Returns the last ticket taken: what closing
    /// waits for.
    mutating func close() -> UInt64 {
        closed = true
        return lastTicket
    }

    /// The database is gone: every waiter fails, and the writer stops.
    mutating func failAll() -> (waiters: [Waiter], positions: [PositionWaiter]) {
        writerScheduled = false
        defer {
            waiters.removeAll()
            positionWaiters.removeAll()
        }
        return (waiters.map(\.waiter), positionWaiters.map(\.waiter))
    }

    // MARK: - Private

    private mutating func takeWaiters(through ticket: UInt64) -> [Waiter] {
        guard waiters.contains(where: { $0.ticket <= ticket }) else { return [] }
        defer { waiters.removeAll { $0.ticket <= ticket } }
        return waiters.filter { $0.ticket <= ticket }.map(\.waiter)
    }

    private mutating func takePositionWaiters(through ticket: UInt64) -> [(ticket: UInt64, waiter: PositionWaiter)] {
        guard positionWaiters.contains(where: { $0.ticket <= ticket }) else { return [] }
        defer { positionWaiters.removeAll { $0.ticket <= ticket } }
        return positionWaiters.filter { $0.ticket <= ticket }
    }
}
