import Foundation
import Testing

@testable import SpoolStorage

/// The write buffer's rules without SQLite, threads or time: `WriteBuffer`
/// is a value, and each test drives it through one interleaving and checks
/// what it tells `EventLog` to do. Waiters are labels here.
struct WriteBufferTests {
    typealias Buffer = WriteBuffer<String, String>

    struct Refusal: Error, Equatable {}

    static func record(_ name: String = "e", bytes: Int = 0) -> EventRecord {
        EventRecord(name: name, parametersJSON: "{\"pad\":\"\(String(repeating: "x", count: bytes))\"}", recordedAt: 1)
    }

    /// Appends one event and returns its ticket (it must be taken).
    @discardableResult
    static func take(_ buffer: inout Buffer, _ name: String = "e", bytes: Int = 0) throws -> UInt64 {
        let record = record(name, bytes: bytes)
        guard case .taken(let ticket, _, _) = Self.append(&buffer, record, bytes: record.bufferedBytes, mayWait: true)
        else {
            throw Refusal()
        }
        return ticket
    }

    /// Offers `record` to `buffer`, which moves it out when it takes it.
    static func append(_ buffer: inout Buffer, _ record: EventRecord, bytes: Int, mayWait: Bool) -> Buffer.Append {
        var offered: EventRecord? = record
        return buffer.append(&offered, bytes: bytes, mayWait: mayWait)
    }

    static func isRefusal(_ result: Result<Void, any Error>?) -> Bool {
        if case .failure(let error)? = result { return error is Refusal }
        return false
    }

    // MARK: - Appending

    @Test("appends take consecutive tickets, and only the first starts the writer")
    func appendsTakeTicketsInOrder() {
        var buffer = Buffer(limits: .standard)
        let starts = (0..<3).map { _ -> Bool in
            guard case .taken(_, _, let start) = Self.append(&buffer, Self.record(), bytes: 10, mayWait: true) else {
                return false
            }
            return start
        }
        #expect(starts == [true, false, false])
        #expect(buffer.pending.map(\.ticket) == [1, 2, 3])
        #expect(buffer.pendingBytes == 30)
        #expect(buffer.lastTicket == 3)
    }

    @Test(
        "at the bound an appender that may wait is told to, one that may not is taken, and while commits fail all are refused"
    )
    func theBound() throws {
        var buffer = Buffer(limits: EventLog.Limits(events: 2, bytes: 1 << 20))
        try Self.take(&buffer)
        try Self.take(&buffer)
        guard case .waitForRoom = Self.append(&buffer, Self.record(), bytes: 10, mayWait: true) else {
            Issue.record("not told to wait")
            return
        }
        #expect(buffer.lastTicket == 2, "waiting takes no ticket")
        guard case .taken = Self.append(&buffer, Self.record(), bytes: 10, mayWait: false) else {
            Issue.record("not taken past the bound")
            return
        }
        let group = buffer.takeForCommit().group
        _ = buffer.failed(keeping: group[...])
        guard case .refused(let events, _) = Self.append(&buffer, Self.record(), bytes: 10, mayWait: false) else {
            Issue.record("not refused while failing")
            return
        }
        #expect(events == 3)
    }

    @Test("a taken event is moved into the buffer; one told to wait or refused stays with its appender")
    func takenEventsAreMovedOthersStay() {
        var buffer = Buffer(limits: EventLog.Limits(events: 1, bytes: 1 << 20))
        var first: EventRecord? = Self.record("first")
        guard case .taken = buffer.append(&first, bytes: 10, mayWait: true) else {
            Issue.record("not taken")
            return
        }
        #expect(first == nil)
        #expect(buffer.pending.map(\.record.name) == ["first"])
        var second: EventRecord? = Self.record("second")
        guard case .waitForRoom = buffer.append(&second, bytes: 10, mayWait: true) else {
            Issue.record("not told to wait")
            return
        }
        #expect(second?.name == "second", "kept for the next attempt")
        _ = buffer.failed(keeping: buffer.takeForCommit().group[...])
        guard case .refused = buffer.append(&second, bytes: 10, mayWait: true) else {
            Issue.record("not refused while failing")
            return
        }
        #expect(second?.name == "second")
    }

    @Test("an empty buffer takes an event larger than the byte bound")
    func anOversizedEventIsTakenAlone() throws {
        var buffer = Buffer(limits: EventLog.Limits(events: 100, bytes: 1_000))
        try Self.take(&buffer, bytes: 5_000)
        guard case .waitForRoom = Self.append(&buffer, Self.record(), bytes: 10, mayWait: true) else {
            Issue.record("a second event joined the oversized one")
            return
        }
    }

    @Test("taking the buffer for a commit makes room and says to wake the appenders waiting for it")
    func takingForCommitMakesRoom() throws {
        var buffer = Buffer(limits: EventLog.Limits(events: 1, bytes: 1 << 20))
        try Self.take(&buffer)
        buffer.startWaitingForRoom()
        #expect(!buffer.waitForRoomIsOver(for: 10))
        let (group, wake) = buffer.takeForCommit()
        #expect(group.map(\.ticket) == [1] && wake)
        let over = buffer.waitForRoomIsOver(for: 10)
        #expect(over)
        guard case .room = buffer.stopWaitingForRoom(found: true) else {
            Issue.record("no room after the swap")
            return
        }
        buffer.startWaitingForRoom()
        guard case .refused = buffer.stopWaitingForRoom(found: false) else {
            Issue.record("a wait that timed out was not refused")
            return
        }
        #expect(buffer.waitsForRoom == 2 && buffer.waitingForRoom == 0)
    }

    // MARK: - Commits, refusals, failures

    @Test("a commit resumes its waiters and answers each position waiter with its event's position")
    func aCommitSettlesItsTickets() throws {
        var buffer = Buffer(limits: .standard)
        for _ in 0..<2 { try Self.take(&buffer) }
        let positionP2 = buffer.positionOfLastAppended("p2")
        #expect(positionP2 == nil)
        try Self.take(&buffer)
        let positionP3 = buffer.positionOfLastAppended("p3")
        #expect(positionP3 == nil)
        for ticket in UInt64(1)...3 {
            let wait = buffer.waitUntilSettled(ticket, "w\(ticket)")
            #expect(wait == nil)
        }
        _ = buffer.takeForCommit()
        let settled = buffer.committed(through: 3, head: 13)
        #expect(settled.waiters == ["w1", "w2", "w3"])
        #expect(settled.positions.map(\.waiter) == ["p2", "p3"])
        #expect(settled.positions.map(\.position) == [12, 13])
        #expect(settled.recoveredAfter == 0)
        if case .success? = buffer.waitUntilSettled(2, "late") {} else { Issue.record("a late wait waited") }
        let positionNow = buffer.positionOfLastAppended("now")
        #expect(positionNow == 13)
    }

    @Test("a refused row fails alone, now and later, and stands at the last committed position")
    func aRefusedRowFailsAlone() throws {
        var buffer = Buffer(limits: .standard)
        for _ in 0..<3 { try Self.take(&buffer) }
        let waitW2 = buffer.waitUntilSettled(2, "w2")
        #expect(waitW2 == nil)
        let waitW3 = buffer.waitUntilSettled(3, "w3")
        #expect(waitW3 == nil)
        _ = buffer.takeForCommit()
        _ = buffer.committed(through: 1, head: 7)
        let refused = buffer.refused(2, because: Refusal())
        #expect(refused.waiters == ["w2"])
        let rest = buffer.committed(through: 3, head: 8)
        #expect(rest.waiters == ["w3"])
        let waitLate = buffer.waitUntilSettled(2, "late")
        #expect(Self.isRefusal(waitLate))
    }

    @Test("a failed commit puts its group back in front, in order, fails its waiters and backs off until one succeeds")
    func aFailedCommitIsRetriedInOrder() throws {
        var buffer = Buffer(limits: .standard)
        for _ in 0..<2 { try Self.take(&buffer) }
        let waitW2 = buffer.waitUntilSettled(2, "w2")
        #expect(waitW2 == nil)
        let positionP2 = buffer.positionOfLastAppended("p2")
        #expect(positionP2 == nil)
        let group = buffer.takeForCommit().group
        try Self.take(&buffer)  // appended while the writer held the group
        var delays: [TimeInterval] = []
        for attempt in 1...9 {
            let failed = buffer.failed(keeping: attempt == 1 ? group[...] : buffer.takeForCommit().group[...])
            #expect(failed.waiters == (attempt == 1 ? ["w2"] : []))
            #expect(failed.buffered == 3)
            let delay = buffer.passEnded(afterFailure: true)
            delays.append(try #require(delay))
        }
        #expect(buffer.pending.map(\.ticket) == [1, 2, 3])
        #expect(delays == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5, 5])
        _ = buffer.takeForCommit()
        let settled = buffer.committed(through: 3, head: 3)
        #expect(settled.recoveredAfter == 9)
        #expect(settled.positions.map(\.position) == [2], "the position waiter stayed for the attempt that committed")
        let nextIdle = buffer.passEnded(afterFailure: false)
        #expect(nextIdle == nil, "idle")
        #expect(!buffer.writerScheduled)
    }

    // MARK: - Erasure during a retry

    @Test("discarding while the writer holds a group that then fails drops it instead of retrying it")
    func discardThenTheHeldGroupFails() throws {
        var buffer = Buffer(limits: .standard)
        for _ in 0..<2 { try Self.take(&buffer) }
        let group = buffer.takeForCommit().group
        try Self.take(&buffer)
        for ticket in UInt64(1)...3 {
            let wait = buffer.waitUntilSettled(ticket, "w\(ticket)")
            #expect(wait == nil)
        }
        let discarded = buffer.discardAll(because: Refusal())
        #expect(discarded.waiters == ["w1", "w2", "w3"])
        let failed = buffer.failed(keeping: group[...])
        #expect(failed.waiters.isEmpty && failed.buffered == 0, "nothing comes back to be committed after the erasure")
        let nextAfterFailure = buffer.passEnded(afterFailure: true)
        #expect(nextAfterFailure == nil)
        let waitLate = buffer.waitUntilSettled(1, "late")
        #expect(Self.isRefusal(waitLate))
        // What is appended after the erasure is kept and committed.
        let after = try Self.take(&buffer)
        let (kept, _) = buffer.takeForCommit()
        #expect(kept.map(\.ticket) == [after])
        _ = buffer.failed(keeping: kept[...])
        #expect(buffer.pending.map(\.ticket) == [after])
    }

    @Test("discarding while the writer holds a group that then commits never moves the settled mark back")
    func discardThenTheHeldGroupCommits() throws {
        var buffer = Buffer(limits: .standard)
        try Self.take(&buffer)
        _ = buffer.takeForCommit()
        try Self.take(&buffer)
        _ = buffer.discardAll(because: Refusal())
        #expect(buffer.settledThrough == 2)
        _ = buffer.committed(through: 1, head: 41)
        #expect(buffer.settledThrough == 2)
        // Consent withdrawal asks for the last position: it answers at once,
        // rather than waiting for a ticket that will never commit.
        let positionWithdrawal = buffer.positionOfLastAppended("withdrawal")
        #expect(positionWithdrawal == 41)
        let waitLate = buffer.waitUntilSettled(2, "late")
        #expect(Self.isRefusal(waitLate))
    }

    @Test("discarding between a failed commit and its retry leaves the retry nothing to commit")
    func discardBetweenAFailureAndItsRetry() throws {
        var buffer = Buffer(limits: .standard)
        for _ in 0..<3 { try Self.take(&buffer) }
        let positionP = buffer.positionOfLastAppended("p")
        #expect(positionP == nil)
        let group = buffer.takeForCommit().group
        _ = buffer.failed(keeping: group[...])
        let nextAfterFailure = buffer.passEnded(afterFailure: true)
        #expect(nextAfterFailure == 0.05)
        let discarded = buffer.discardAll(because: Refusal())
        #expect(discarded.positions.map(\.position) == [0], "nothing was ever committed")
        let taken = buffer.takeForCommit()
        #expect(taken.group.isEmpty)
        let nextIdle = buffer.passEnded(afterFailure: false)
        #expect(nextIdle == nil)
    }

    // MARK: - Closing

    @Test("closing takes no more events; once the database is gone every waiter fails")
    func closing() throws {
        var buffer = Buffer(limits: .standard)
        try Self.take(&buffer)
        let last = buffer.close()
        #expect(last == 1)
        guard case .closed = Self.append(&buffer, Self.record(), bytes: 10, mayWait: true) else {
            Issue.record("taken after close")
            return
        }
        let waitW1 = buffer.waitUntilSettled(1, "w1")
        #expect(waitW1 == nil, "the last attempt is still to come")
        let positionP1 = buffer.positionOfLastAppended("p1")
        #expect(positionP1 == nil)
        let failed = buffer.failAll()
        #expect(failed.waiters == ["w1"] && failed.positions == ["p1"])
        guard case .failure(StorageError.closed)? = buffer.waitUntilSettled(1, "late") else {
            Issue.record("a wait after the end did not fail")
            return
        }
    }
}
