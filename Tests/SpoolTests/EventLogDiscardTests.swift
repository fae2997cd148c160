import Foundation
import Testing

@testable import SpoolStorage

/// Discarding what the writer has not committed (erasure on a full disk):
/// against a real database, including while the writer holds a group.
/// `WriteBufferTests` covers every interleaving of the rules without one.
struct EventLogDiscardTests {
    @Test func discardingTheBufferOnAFullDiskFailsItsWaitersAndNothingReachesTheFile() async throws {
        let directory = TemporaryDirectory()
        let database = try DatabaseQueue(path: directory.databaseURL.path)
        let log = EventLog(database: database)
        let buffered = log.bufferedAfterFailedCommits()
        try await log.appendDurably(3)
        try database.sync { try $0.capAtCurrentSize() }
        let pad = String(repeating: "x", count: 50_000)
        var receipts: [AppendReceipt] = []
        for index in 0..<10 {
            receipts.append(
                try log.append(
                    EventRecord(name: "erased", parametersJSON: #"{"i":\#(index),"pad":"\#(pad)"}"#, recordedAt: 1)))
        }
        await #expect(throws: (any Error).self) { try await log.waitUntilAllDurable() }
        #expect(buffered.withLock { $0 } == 10, "the failed group is back in the buffer")
        log.discardBuffered(because: StorageError.erased)
        #expect(log.bufferedCount == 0)
        #expect(log.bufferedBytes == 0)
        // Every wait for a discarded event, early or late, says it was erased.
        for receipt in [receipts[0], receipts[9]] {
            await #expect(throws: StorageError.erased) { try await log.waitUntilDurable(receipt) }
        }
        // Space comes back: nothing discarded is committed, and the log goes on.
        try database.sync { try $0.uncap() }
        let after = try log.append(EventRecord(name: "after", parametersJSON: "{}", recordedAt: 2))
        try await log.waitUntilDurable(after)
        let names = try await log.readEvents(after: 0, limit: 100).map(\.name)
        #expect(!names.contains("erased"))
        #expect(names.last == "after")
        await log.close()
        database.close()
    }

    @Test("discarding while the writer commits a group never moves the settled mark back")
    func discardingWhileAGroupCommitsKeepsPositionsAnswering() async throws {
        let log = EventLog(database: try DatabaseQueue(path: Connection.inMemoryPath))
        defer { log.database.close() }
        // The first group waits inside its transaction at the gate.
        let (gate, committed) = (Gate(), Protected(0))
        log.setGroupReader { _, _ in
            gate.pass()
            return nil
        }
        log.setCommitHandler { count, _, _, _ in committed.withLock { $0 += count } }
        try log.append(EventRecord(name: "held", parametersJSON: "{}", recordedAt: 1))
        #expect(try await waitUntil(timeout: 60) { gate.reached })
        try log.append(EventRecord(name: "discarded", parametersJSON: "{}", recordedAt: 1))
        log.discardBuffered(because: StorageError.erased)
        gate.open()
        #expect(try await waitUntil(timeout: 60) { committed.withLock { $0 } == 1 })
        #expect(!gate.timedOut)
        // What consent withdrawal asks: answered at once, not when a later
        // append happens to commit.
        let position = Protected<Int64?>(nil)
        log.positionOfLastAppended { result in position.withLock { $0 = try? result.get() } }  // try?: nil fails below
        #expect(try await waitUntil(timeout: 2) { position.withLock { $0 } != nil })
        #expect(position.withLock { $0 } == 1)
    }

    @Test("a group whose commit fails after an erasure discarded it is dropped, not retried into the file")
    func aDiscardedGroupThatFailsIsNotRetried() async throws {
        let log = EventLog(database: try DatabaseQueue(path: Connection.inMemoryPath))
        defer { log.database.close() }
        // The first group waits inside its transaction at the gate, then
        // fails: its transaction is gone, so COMMIT fails (a real SQLITE_ERROR).
        let gate = Gate()
        log.setGroupReader { _, connection in
            let first = !gate.reached
            gate.pass()
            if first { try? connection.execute("ROLLBACK") }  // try?: the COMMIT after it fails either way
            return nil
        }
        let held = try log.append(EventRecord(name: "held", parametersJSON: "{}", recordedAt: 1))
        #expect(try await waitUntil(timeout: 60) { gate.reached })
        log.discardBuffered(because: StorageError.erased)
        gate.open()
        await #expect(throws: StorageError.erased) { try await log.waitUntilDurable(held) }
        #expect(!gate.timedOut)
        // The next event commits alone; the discarded one never reaches the file.
        try await log.appendDurably(1, name: "after")
        #expect(try await log.readEvents(after: 0, limit: 10).map(\.name) == ["after"])
    }
}
