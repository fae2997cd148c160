import CSQLite
import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

struct CheckpointerTests {
    /// Under continuous appends a passive background checkpoint never catches
    /// up; the writer's RESTART past 4000 pages keeps the WAL bounded.
    @Test func theWALStaysBoundedUnderContinuousAppends() async throws {
        let directory = TemporaryDirectory()
        // A buffer that holds the 10,000 events between waits: appends never
        // wait for room, whose 2 s bound a slow writer (the thread sanitizer,
        // a loaded machine) can miss; commits still go in groups of 4,096.
        let log = EventLog(
            database: try DatabaseQueue(path: directory.databaseURL.path),
            limits: EventLog.Limits(events: 20_000, bytes: 64 << 20))
        let padding = String(repeating: "p", count: 400)
        var largest = 0
        for chunk in 0..<30 {
            for index in 0..<2_000 {
                try log.append(
                    EventRecord(
                        name: "load", parametersJSON: #"{"i":\#(chunk * 2_000 + index),"pad":"\#(padding)"}"#,
                        recordedAt: 1))
            }
            if chunk % 5 == 4 { try await log.waitUntilAllDurable() }
            let size =
                (try? FileManager.default.attributesOfItem(atPath: directory.databaseURL.path + "-wal")[.size] as? Int)
                ?? 0
            largest = max(largest, size)
        }
        try await log.waitUntilAllDurable()
        // 60k events of ~0.5 KB is ~30 MB of pages, written again and again as
        // the tree grows: 130 MB of WAL without the restart. With it the WAL
        // stays near 16 MB (more only while a background pass holds it off).
        #expect(largest < 48 * 1_048_576, "WAL reached \(largest / 1_048_576) MB")
        #expect(try await log.countEvents(after: 0) == 60_000)
        await log.close()
        log.database.close()
        #expect(!FileManager.default.fileExists(atPath: directory.databaseURL.path + "-wal"), "closing removes the WAL")
    }

    /// A reader holding a snapshot (the sqlite3 CLI inside a transaction, an
    /// app extension) keeps the WAL from restarting; the writer must carry on
    /// instead of waiting out its busy timeout on every commit.
    @Test func aLongReaderDoesNotStallTheWriter() async throws {
        let directory = TemporaryDirectory()
        // A busy timeout of 30 s: a writer that waits one out per commit
        // misses the deadline below by far, even under the thread sanitizer.
        let options = ConnectionOptions(busyTimeoutMilliseconds: 30_000)
        let log = EventLog(database: try DatabaseQueue(path: directory.databaseURL.path, options: options))
        try await log.appendDurably(10)
        let reader = try Connection(path: directory.databaseURL.path, options: ConnectionOptions())
        try reader.execute("BEGIN")
        #expect(try reader.scalarInt("SELECT count(*) FROM events") == 10)
        let padding = String(repeating: "r", count: 400)
        // The test bounds itself (Swift Testing's .timeLimit needs iOS 16 /
        // macOS 13): a writer that waits out its busy timeout per commit
        // misses this deadline within a few chunks.
        let seconds: TimeInterval = isThreadSanitized ? 300 : 120
        let deadline = Date().addingTimeInterval(seconds)
        for chunk in 0..<30 {
            try #require(
                Date() < deadline, "the writer stalls behind the reader: \(chunk) of 30 chunks in \(Int(seconds)) s")
            for index in 0..<2_000 {
                try log.append(
                    EventRecord(
                        name: "busy", parametersJSON: #"{"i":\#(chunk * 2_000 + index),"pad":"\#(padding)"}"#,
                        recordedAt: 1))
            }
            try await log.waitUntilAllDurable()
        }
        #expect(try await log.countEvents(after: 0) == 60_010)
        #expect(try reader.scalarInt("SELECT count(*) FROM events") == 10, "the reader kept its snapshot")
        try reader.execute("COMMIT")
        reader.close()
        await log.close()
        log.database.close()
    }

    /// While the WAL cannot start over (a reader holds a snapshot, or the
    /// writer commits while every pass runs), a writer committing page
    /// after page asks for a background pass once per threshold of growth,
    /// not after every commit: each pass copies and syncs what it can.
    @Test func theWriterAsksForAPassOncePerThresholdOfGrowth() throws {
        let directory = TemporaryDirectory()
        let path = directory.databaseURL.path
        let writer = try Connection(path: path, options: ConnectionOptions())
        try writer.execute("CREATE TABLE pages (value BLOB)")
        let pageSize = try writer.pageSize()
        let checkpointer = try Checkpointer(
            path: path, options: ConnectionOptions(), thresholdBytes: 8 * pageSize, restartBytes: 1 << 30)
        checkpointer.install(on: writer)
        let reader = try Connection(path: path, options: ConnectionOptions())
        try reader.execute("BEGIN")
        #expect(try reader.scalarInt("SELECT count(*) FROM pages") == 0)
        let commits = 200
        for _ in 0..<commits {
            try writer.withStatement("INSERT INTO pages (value) VALUES (zeroblob(?))") { statement in
                try statement.bind(Int64(pageSize / 2), at: 1)
                try statement.step()
            }
        }
        let walBytes = try #require(
            FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int)
        let frames = walBytes / (pageSize + 24)
        #expect(frames > 16 * 8, "the WAL grew past several thresholds: \(frames) frames")
        #expect(checkpointer.commitRequests >= frames / 16, "\(checkpointer.commitRequests) for \(frames) frames")
        #expect(checkpointer.commitRequests <= frames / 8 + 1, "\(checkpointer.commitRequests) for \(frames) frames")
        try reader.execute("COMMIT")
        reader.close()
        writer.close()
        checkpointer.close()
    }
}
