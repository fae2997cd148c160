import CSQLite
import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

struct EventLogTests {
    @Test func appendedEventsAreDurableInAcceptanceOrder() async throws {
        let directory = TemporaryDirectory()
        let log = EventLog(database: try DatabaseQueue(path: directory.databaseURL.path))
        let receipts = try await log.appendDurably(500)
        await log.close()
        log.database.close()

        // Reopen: everything is there, in order, ids intact.
        let reopened = try DatabaseQueue(path: directory.databaseURL.path)
        defer { reopened.close() }
        let events = try reopened.sync { try $0.readEvents(after: 0, limit: 10_000, now: 0) }
        #expect(events.map(\.id) == receipts.map(\.id))
        #expect(events.map(\.seq) == Array(1...500))
        #expect(Set(events.map(\.id)).count == 500)
    }

    @Test func concurrentAppendsKeepTheOrderTheyWereAccepted() async throws {
        let log = EventLog(database: try DatabaseQueue(path: Connection.inMemoryPath))
        defer { log.database.close() }
        let receipts = Protected<[AppendReceipt]>([])
        await withTaskGroup(of: Void.self) { group in
            for thread in 0..<8 {
                group.addTask {
                    for index in 0..<500 {
                        let receipt = try! log.append(
                            EventRecord(name: "t\(thread)", parametersJSON: #"{"i":\#(index)}"#, recordedAt: 1))
                        receipts.withLock { $0.append(receipt) }
                    }
                }
            }
        }
        try await log.waitUntilAllDurable()
        let events = try await log.readEvents(after: 0, limit: 10_000)
        let byTicket = receipts.withLock { $0 }.sorted { $0.ticket < $1.ticket }
        #expect(events.count == 4_000)
        #expect(events.map(\.id) == byTicket.map(\.id))
        // Within one appender, its own events are in its order.
        for thread in 0..<8 {
            let mine = events.filter { $0.name == "t\(thread)" }.map(\.parametersJSON)
            #expect(mine == (0..<500).map { #"{"i":\#($0)}"# })
        }
    }

    @Test func finishedEventsAreDeletedInRunsOrOnceTheWholeLogIsFinished() async throws {
        let log = EventLog(database: try DatabaseQueue(path: Connection.inMemoryPath))
        defer { log.database.close() }
        let run = Int(Connection.finishedRunToDelete)
        try await log.appendDurably(run + 100)
        #expect(try await log.registerConsumer("uploader", startingAt: .oldest) == 0)
        #expect(try await log.registerConsumer("listener", startingAt: .oldest) == 0)

        // One consumer ahead: nothing is deleted.
        #expect(try await log.advanceConsumer("uploader", to: Int64(run + 50)) == 0)
        // Both past 40, fewer than a run: kept for now.
        #expect(try await log.advanceConsumer("listener", to: 40) == 0)
        #expect(try await log.countEvents(after: 0) == run + 100)
        // Both past a run: deleted in the transaction that advanced the last.
        #expect(try await log.advanceConsumer("listener", to: Int64(run)) == run)
        #expect(try await log.countEvents(after: 0) == 100)
        // Positions never move backwards.
        try await log.advanceConsumer("uploader", to: 10)
        #expect(try await log.position(of: "uploader") == Int64(run + 50))
        let next = try await log.readEvents(after: Int64(run), limit: 5)
        #expect(next.map(\.seq) == (1...5).map { Int64(run + $0) })
        // The whole log finished: the rest go, though fewer than a run.
        try await log.advanceConsumer("uploader", to: Int64(run + 100))
        #expect(try await log.advanceConsumer("listener", to: Int64(run + 100)) == 100)
        #expect(try await log.countEvents(after: 0) == 0)
    }

    @Test func positionsAreNeverReusedAfterTheLogEmpties() async throws {
        let log = EventLog(database: try DatabaseQueue(path: Connection.inMemoryPath))
        defer { log.database.close() }
        try await log.appendDurably(10)
        _ = try await log.registerConsumer("uploader", startingAt: .oldest)
        try await log.advanceConsumer("uploader", to: 10)
        #expect(try await log.countEvents(after: 0) == 0)
        try await log.appendDurably(3)
        let events = try await log.readEvents(after: 10, limit: 10)
        #expect(events.map(\.seq) == [11, 12, 13])
        // A consumer registered at the end starts after everything ever assigned.
        #expect(try await log.registerConsumer("late", startingAt: .end) == 13)
    }

    @Test func readStopsBeforeTheByteBudgetButAlwaysReturnsOne() async throws {
        let log = EventLog(database: try DatabaseQueue(path: Connection.inMemoryPath))
        defer { log.database.close() }
        try await log.appendDurably(10, name: "n")
        let perEvent = sampleParameters(0).utf8.count + 1
        let three = try await log.readEvents(after: 0, limit: 100, maxBytes: perEvent * 3 + 1)
        #expect(three.count == 3)
        let one = try await log.readEvents(after: 0, limit: 100, maxBytes: 1)
        #expect(one.count == 1)
    }

    @Test func historyRowsAreWrittenInTheSameCommit() async throws {
        let log = EventLog(database: try DatabaseQueue(path: Connection.inMemoryPath))
        defer { log.database.close() }
        try log.append(EventRecord(name: "a", parametersJSON: "{}", recordedAt: 10, addsToHistory: true))
        try log.append(EventRecord(name: "b", parametersJSON: "{}", recordedAt: 11, addsToHistory: false))
        try await log.waitUntilAllDurable()
        let names = try log.database.sync { try $0.scalarString("SELECT group_concat(name) FROM event_history") }
        #expect(names == "a")
    }

    @Test("history rows follow each event's flag, in runs within one group")
    func historyRunsFollowEachEventsFlag() async throws {
        let log = EventLog(database: try DatabaseQueue(path: Connection.inMemoryPath))
        defer { log.database.close() }
        let flags = [true, false, true, true, false, false, true, false, true]
        for (index, flag) in flags.enumerated() {
            try log.append(
                EventRecord(name: "e\(index)", parametersJSON: "{}", recordedAt: Double(index), addsToHistory: flag))
        }
        try await log.waitUntilAllDurable()
        let names = try log.database.sync {
            try $0.scalarString("SELECT group_concat(name, ',') FROM (SELECT name FROM event_history ORDER BY id)")
        }
        #expect(names == flags.enumerated().filter(\.element).map { "e\($0.offset)" }.joined(separator: ","))
    }

    @Test("a history row counts one name's occurrences in one millisecond, across commits")
    func historyCountsByNameAndMillisecond() async throws {
        let log = EventLog(database: try DatabaseQueue(path: Connection.inMemoryPath))
        defer { log.database.close() }
        func append(_ name: String, at time: Double, history: Bool = true) throws {
            try log.append(EventRecord(name: name, parametersJSON: "{}", recordedAt: time, addsToHistory: history))
        }
        try append("a", at: 10.0001)
        try append("a", at: 10.0002)
        try append("b", at: 10.0003)
        try append("a", at: 10.0004)  // the same millisecond, after another name
        try append("a", at: 10.0005, history: false)
        try append("a", at: 10.0011)
        try append("a", at: -0.0004)  // before 1970: rounded down too
        try await log.waitUntilAllDurable()
        try append("a", at: 10.0009)  // a later commit adds to the row
        try await log.waitUntilAllDurable()
        let rows = try log.database.sync {
            try $0.scalarString(
                """
                SELECT group_concat(name || '@' || printf('%.3f', recorded_at) || 'x' || occurrences, ' ') \
                FROM (SELECT * FROM event_history ORDER BY id)
                """)
        }
        #expect(rows == "a@10.000x4 b@10.000x1 a@10.001x1 a@-0.001x1")
        let counts = try log.database.sync { connection in
            try [
                connection.historyCount(of: "a", since: nil, until: 10.0002, cap: 100),
                connection.historyCount(of: "a", since: nil, until: nil, cap: 100),
                connection.historyCount(of: "a", since: 10.0005, until: 11, cap: 100),
                connection.historyCount(of: "a", since: nil, until: nil, cap: 3),
            ]
        }
        // Until a time: whole milliseconds up to it (the row is at 10.000);
        // since: from its millisecond on; the cap stops the count.
        #expect(counts == [5, 6, 5, 3])
    }

    @Test("in a burst the WAL stays near its restart size, and its file is truncated once the writer is idle")
    func theWALIsTruncatedAfterABurst() async throws {
        let directory = TemporaryDirectory()
        // The shrink runs when the test moves time, after the burst: on a
        // loaded machine a pause in the appending loop would otherwise let
        // it truncate the WAL halfway, and the rest of the burst (under the
        // 4 MiB that asks for a shrink) would stay in the file.
        let clock = ManualClock()
        let database = try DatabaseQueue(path: directory.databaseURL.path, options: ConnectionOptions(clock: clock))
        let log = EventLog(database: database)
        log.shrinkDelay = 1
        let json = "{\"padding\":\"" + String(repeating: "x", count: 2_400) + "\"}"
        let wal = directory.databaseURL.path + "-wal"
        func walBytes() -> Int { (try? FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int) ?? -1 }
        // About 30 MB of rows: the WAL passes its 16 MiB restart size, where
        // the writer starts it over. A restart attempt that meets a running
        // background pass waits for the next commit, so the file can pass
        // the restart size by a few groups (spool-bench saw up to 23 MB);
        // without the restart it grew past 50 MB.
        var largest = 0
        // (Under the thread sanitizer, whose slowdown with the whole suite
        // beside it once kept the writer from making room for 2 s, 6 MB:
        // past the checkpoint threshold, not the restart size.)
        for index in 0..<(isThreadSanitized ? 2_500 : 12_000) {
            try log.append(EventRecord(name: "bulk", parametersJSON: json, recordedAt: 1, addsToHistory: true))
            if index % 200 == 0 { largest = max(largest, walBytes()) }
        }
        try await log.waitUntilAllDurable()
        #expect(largest <= 2 * Checkpointer.restartBytes, "the WAL reached \(largest) bytes")
        #expect(
            try await waitUntil {
                clock.advance(by: 1)
                return walBytes() == 0
            }, "the WAL still holds \(walBytes()) bytes")
        await log.close()
        log.database.close()
    }

    @Test("a shrink that comes while the writer is busy waits for it to be idle, then truncates the WAL")
    func aShrinkWaitsForTheWriter() async throws {
        let directory = TemporaryDirectory()
        let clock = ManualClock()
        let database = try DatabaseQueue(path: directory.databaseURL.path, options: ConnectionOptions(clock: clock))
        let log = EventLog(database: database)
        log.shrinkDelay = 1
        let json = "{\"padding\":\"" + String(repeating: "x", count: 2_400) + "\"}"
        let wal = directory.databaseURL.path + "-wal"
        // -1 when the WAL cannot be read: never mistaken for a truncated one.
        func walBytes() -> Int { (try? FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int) ?? -1 }
        func append(_ count: Int) throws {
            for _ in 0..<count { try log.append(EventRecord(name: "bulk", parametersJSON: json, recordedAt: 1)) }
        }
        // Past the 4 MiB checkpoint threshold: the idle writer asks for a shrink.
        try append(2_500)
        try await log.waitUntilAllDurable()
        #expect(try await waitUntil { clock.timersPending(dueIn: 1) == 1 }, "no shrink was asked for")
        // The shrink fires while the queue is held, and a new event is
        // appended behind it: the writer is busy when the shrink runs.
        let hold = DispatchSemaphore(value: 0)
        database.async { _ in hold.wait() }
        clock.advance(by: 1)
        try append(1)
        hold.signal()
        try await log.waitUntilAllDurable()
        #expect(clock.timersPending(dueIn: 1) == 1, "the shrink did not wait for the writer")
        // (A shrink that meets the background checkpoint tries again a
        // second later: time moves on while waiting.)
        #expect(
            try await waitUntil {
                clock.advance(by: 1)
                return walBytes() == 0
            }, "the WAL still holds \(walBytes()) bytes")
        await log.close()
        log.database.close()
    }

    @Test func aFailedCommitFailsItsWaitersAndKeepsTheEventsBuffered() async throws {
        let directory = TemporaryDirectory()
        let database = try DatabaseQueue(path: directory.databaseURL.path)
        // Room for all 50 events of 100 KB while commits fail.
        let log = EventLog(database: database, limits: EventLog.Limits(events: 1_000, bytes: 16 << 20))
        let buffered = log.bufferedAfterFailedCommits()
        try await log.appendDurably(5)
        // A real SQLITE_FULL: cap the file at its current size.
        try database.sync { try $0.capAtCurrentSize() }
        let big = String(repeating: "x", count: 100_000)
        var receipts: [AppendReceipt] = []
        for index in 0..<50 {
            receipts.append(
                try log.append(
                    EventRecord(name: "big", parametersJSON: #"{"i":\#(index),"pad":"\#(big)"}"#, recordedAt: 1)))
        }
        await #expect {
            try await log.waitUntilDurable(receipts[receipts.count - 1])
        } throws: { error in
            // Not lost: the waiter is told the event is still buffered.
            guard case StorageError.notYetCommitted(let underlying) = error else { return false }
            return underlying.resultCode == .full
        }
        #expect(buffered.withLock { $0 } == 50, "the failed group is back in the buffer")
        // Space comes back: the retry commits everything, in order.
        try database.sync { try $0.uncap() }
        try await log.waitUntilDurable(receipts[receipts.count - 1])
        let events = try await log.readEvents(after: 5, limit: 100)
        #expect(events.map(\.id) == receipts.map(\.id))
        await log.close()
        database.close()
    }

    @Test func anEventLargerThanTheByteBoundIsTakenAloneNotRefusedForever() async throws {
        let directory = TemporaryDirectory()
        let log = EventLog(
            database: try DatabaseQueue(path: directory.databaseURL.path),
            limits: EventLog.Limits(events: 100, bytes: 1_000))
        defer { log.database.close() }
        let pad = String(repeating: "x", count: 5_000)
        var receipts: [AppendReceipt] = []
        for index in 0..<3 {
            receipts.append(
                try log.append(
                    EventRecord(name: "big", parametersJSON: #"{"i":\#(index),"pad":"\#(pad)"}"#, recordedAt: 1)))
            receipts.append(try log.append(EventRecord(name: "small", parametersJSON: "{}", recordedAt: 1)))
        }
        try await log.waitUntilAllDurable()
        let events = try await log.readEvents(after: 0, limit: 10)
        #expect(events.map(\.id) == receipts.map(\.id))
        await log.close()
    }

    @Test func aRowTheDatabaseRefusesFailsAloneAndTheRestCommit() async throws {
        let log = EventLog(database: try DatabaseQueue(path: Connection.inMemoryPath))
        defer { log.database.close() }
        // A real per-row refusal: lower SQLite's string length limit so one
        // event is SQLITE_TOOBIG.
        try log.database.sync { _ = sqlite3_limit($0.handle, SQLITE_LIMIT_LENGTH, 1_000) }
        var receipts: [AppendReceipt] = []
        for index in 0..<20 {
            let json = index == 7 ? #"{"pad":"\#(String(repeating: "x", count: 2_000))"}"# : #"{"i":\#(index)}"#
            receipts.append(try log.append(EventRecord(name: "e\(index)", parametersJSON: json, recordedAt: 1)))
        }
        await #expect {
            try await log.waitUntilDurable(receipts[7])
        } throws: { error in
            (error as? SQLiteError)?.resultCode == .tooBig
        }
        try await log.waitUntilDurable(receipts[19])
        let names = try await log.readEvents(after: 0, limit: 100).map(\.name)
        #expect(names == (0..<20).filter { $0 != 7 }.map { "e\($0)" })
        // The log goes on, and a late wait on the refused row still gets the error.
        try await log.appendDurably(3, name: "later")
        await #expect(throws: SQLiteError.self) { try await log.waitUntilDurable(receipts[7]) }
    }

    @Test("the writer's own inserts skip the schema's CHECKs, and the connection enforces them again after")
    func theWriterSkipsTheChecksOnlyForItsOwnInserts() async throws {
        let log = EventLog(database: try DatabaseQueue(path: Connection.inMemoryPath))
        defer { log.database.close() }
        // Read inside the group's transaction, after its inserts.
        let inside = Protected<[Int]>([])
        log.setGroupReader { _, connection in
            let ignored = (try? connection.scalarInt("PRAGMA ignore_check_constraints")) ?? -1  // try?: -1 fails below
            inside.withLock { $0.append(ignored) }
            return nil
        }
        try await log.appendDurably(3)
        let readings = inside.withLock { $0 }
        #expect(!readings.isEmpty && readings.allSatisfy { $0 == 1 }, "each group's inserts ran with the CHECKs off")
        let (ignored, invalid) = try log.database.sync { connection in
            (
                try connection.scalarInt("PRAGMA ignore_check_constraints"),
                try connection.scalarInt("SELECT count(*) FROM events WHERE NOT json_valid(parameters)")
            )
        }
        #expect(ignored == 0, "after the commit the connection enforces the CHECKs again")
        #expect(invalid == 0)
        // Any other write on the file still meets them.
        #expect {
            try log.database.sync { connection in
                try connection.execute(
                    "INSERT INTO events (seq, id, name, parameters, recorded_at) VALUES (99, 'x', 'x', 'not json', 1)")
            }
        } throws: { error in
            (error as? SQLiteError)?.resultCode == .constraint
        }
    }

    @Test func appendsAfterCloseAreRefused() async throws {
        let log = EventLog(database: try DatabaseQueue(path: Connection.inMemoryPath))
        try await log.appendDurably(1)
        await log.close()
        #expect(throws: StorageError.closed) {
            try log.append(EventRecord(name: "late", parametersJSON: "{}", recordedAt: 1))
        }
        log.database.close()
    }
}
