import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// The record of every request (C6) against the collector's own log: the
/// results stream, the handler and `upload_batches`.
extension CollectorBoundaryAdversaryTests {
    static func batchRows(_ engine: EventEngine) async throws -> [String] {
        try await engine.query { connection in
            try connection.withStatement(
                "SELECT status, event_count, first_event_id, last_event_id, compressed FROM upload_batches ORDER BY id"
            ) { statement in
                var rows: [String] = []
                while try statement.step() {
                    let status = statement.isNull(at: 0) ? "nil" : String(statement.int(at: 0))
                    rows.append(
                        "\(status) \(statement.int(at: 1)) \(statement.string(at: 2)) \(statement.string(at: 3)) \(statement.int(at: 4))"
                    )
                }
                return rows
            }
        }
    }

    static func row(_ request: TestCollector.Request) -> String {
        let status = request.status.map(String.init) ?? "nil"
        return
            "\(status) \(request.ids.count) \(request.ids.first ?? "") \(request.ids.last ?? "") \(request.content_encoding == "gzip" ? 1 : 0)"
    }

    @Test(
        "C6: the results stream, the handler and upload_batches agree with the collector's log: a 503, a gzip retry, a bisection, a 401"
    )
    func resultsAgreeWithTheCollector() async throws {
        let directory = TemporaryDirectory()
        let ids = try await Self.prefill(directory, 29)
        let collector = try await TestCollector(directory)
        try await collector.control(["reject_ids": [ids[15]], "mode": "status", "status": 503, "times": 1])
        let handled = Protected<[UploadBatchResult]>([])
        var configuration = uploadingConfiguration(
            directory, collector: collector, batchSize: 10, retry: Self.slowRetry)
        configuration.uploadResultHandler = { result in handled.withLock { $0.append(result) } }
        let engine = EventEngine(configuration: configuration)
        let streamed = Protected<[UploadBatchResult]>([])
        let stream = engine.uploadResults()
        let reader = Task { for await result in stream { streamed.withLock { $0.append(result) } } }
        try await engine.start()
        #expect(await Self.flushes(engine, 3))
        try await collector.control(["path_status": ["/collect": 401]])
        _ = try recordEvents(engine, 1, prefix: "late")
        await expectUploadDeferred { try await engine.flush() }
        try await collector.control(["path_status": [String: Int]()])
        #expect(await Self.flushes(engine, 3))
        let requests = collector.requests()
        #expect(
            try await waitUntil {
                handled.withLock { $0.count } >= requests.count && streamed.withLock { $0.count } >= requests.count
            })
        func line(_ result: UploadBatchResult) -> String {
            "\(result.status.map(String.init) ?? "nil") \(result.eventCount) \(result.firstEventID) \(result.lastEventID) \(result.compressed ? 1 : 0)"
        }
        let expected = requests.map(Self.row)
        #expect(handled.withLock { $0.map(line) } == expected)
        #expect(streamed.withLock { $0.map(line) } == expected)
        #expect(try await Self.batchRows(engine) == expected)
        await engine.close()
        reader.cancel()
    }

    @Test("C6: upload_batches keeps the last 1,000 requests, and they are the collector's last 1,000")
    func batchTableKeepsTheLastThousand() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let engine = uploadingEngine(directory, collector: collector, batchSize: 1, retry: Self.slowRetry)
        try await engine.start()
        _ = try recordEvents(engine, 1_100)
        try await engine.settle()
        #expect(await Self.flushes(engine, 3))
        let rows = try await Self.batchRows(engine)
        let requests = collector.requests()
        #expect(requests.count >= 1_101)
        #expect(rows.count == 1_000)
        #expect(rows == requests.suffix(1_000).map(Self.row))
        await engine.close()
    }

    @Test(
        "C6: upload_batches keeps the newest requests within both bounds, 1,000 rows and 20,000 events",
        arguments: [(eventsPerRequest: 1, requests: 1_050), (eventsPerRequest: 1_500, requests: 30)])
    func batchTableBounds(eventsPerRequest: Int, requests: Int) throws {
        let directory = TemporaryDirectory()
        let database = try DatabaseQueue(path: directory.databaseURL.path)
        let ids =
            "["
            + Array(repeating: #""0123456789abcdef0123456789abcdef""#, count: eventsPerRequest)
            .joined(separator: ",") + "]"
        let kept = try database.sync { connection -> [Int64] in
            for request in 1...requests {
                let first = Int64((request - 1) * eventsPerRequest + 1)
                try connection.recordUploadBatch(
                    UploadBatchRecord(
                        sentAt: Double(request), firstSeq: first, lastSeq: first + Int64(eventsPerRequest) - 1,
                        firstEventID: "a", lastEventID: "b", eventCount: eventsPerRequest, eventIDs: ids,
                        status: 200, outcome: "accepted", detail: nil, compressed: false, bodyBytes: 1,
                        durationMilliseconds: 1))
            }
            return try connection.withStatement("SELECT CAST(sent_at AS INTEGER) FROM upload_batches ORDER BY id") {
                statement in
                var rows: [Int64] = []
                while try statement.step() { rows.append(statement.int64(at: 0)) }
                return rows
            }
        }
        let rows = min(
            Int(Connection.uploadBatchesKept), Int(Connection.uploadBatchEventsKept) / eventsPerRequest)
        #expect(kept == Array(Int64(requests - rows + 1)...Int64(requests)))
    }

    /// The `upload_batches` ids (in row order) whose range the documented
    /// query puts `id` in.
    static func rowsFound(for id: String, _ engine: EventEngine) async throws -> [Int64] {
        try await engine.query { connection in
            try connection.withStatement(
                "SELECT id FROM upload_batches WHERE instr(event_ids, ?) > 0 ORDER BY id"
            ) { statement in
                try statement.bind(id, at: 1)
                var rows: [Int64] = []
                while try statement.step() { rows.append(statement.int64(at: 0)) }
                return rows
            }
        }
    }

    @Test("C6: the documented query \"was event X sent?\" finds exactly the request that carried each event of a burst")
    func documentedQueryForABurst() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let engine = uploadingEngine(directory, collector: collector, batchSize: 10, retry: Self.slowRetry)
        try await engine.start()
        _ = try recordEvents(engine, 199)  // with session_start: 20 requests of 10
        try await engine.settle()
        #expect(await Self.flushes(engine, 3))
        let requests = collector.requests()
        #expect(requests.count == 20 && requests.allSatisfy { $0.status == 200 })
        var (missed, wrong) = (0, 0)
        for (index, request) in requests.enumerated() {
            for id in request.ids {
                let rows = try await Self.rowsFound(for: id, engine)
                if !rows.contains(Int64(index + 1)) { missed += 1 }
                wrong += rows.filter { $0 != Int64(index + 1) }.count
            }
        }
        #expect(
            missed == 0 && wrong == 0,
            "of 200 events: not found in their request's row \(missed), found in another request's row \(wrong)")
        await engine.close()
    }

    @Test("C6: after a dead letter is put back, the documented query finds every event of the request that carried it")
    func documentedQueryAfterARequeue() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let engine = uploadingEngine(
            directory, collector: collector, batchSize: 100, retry: Self.slowRetry,
            request: UploadRequestOptions(compression: .identity))
        try await engine.start()
        let first = try recordEvents(engine, 3)
        try await engine.settle()
        try await collector.control(["reject_ids": [first[1]]])
        try await engine.flush()
        try await collector.control(["reject_ids": [String](), "mode": "status", "status": 503])
        let newer = try recordEvents(engine, 3, prefix: "newer")  // a round trip later: a later millisecond
        try await engine.settle()
        #expect(try await engine.requeueDeadLetters() == 1)  // at the tail, after the newer ones
        try await collector.control(["mode": "ok"])
        #expect(await Self.flushes(engine, 3))
        #expect(
            collector.requests().last?.ids == newer + [first[1]], "one request: the newer events and the dead letter")
        var notFound = 0
        for id in newer + [first[1]] where try await Self.rowsFound(for: id, engine).isEmpty { notFound += 1 }
        #expect(notFound == 0, "\(notFound) of the 4 events are not found by the documented query")
        await engine.close()
    }

    @Test(
        "C6: a flush that ends on a database error keeps its requests' rows in memory, and eraseAllData forgets them: upload_batches never names an erased event"
    )
    func erasureForgetsUnwrittenRequestRows() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "hold", "times": 1, "hang_seconds": 30])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 100, requestTimeout: 30)
        try await engine.start()
        let erased = try recordEvents(engine, 3, prefix: "erased")
        try await engine.settle()
        let flush = Task { try await engine.flush() }
        #expect(try await collector.waitForHeld())
        // Another process holds the write lock while the answer comes: the
        // transaction that would write the request's row fails (busy).
        let path = try #require(engine.databaseQueue?.path)
        let other = try Connection(path: path, options: ConnectionOptions(busyTimeoutMilliseconds: 0))
        try other.execute("BEGIN IMMEDIATE")
        try await collector.control(["release": 200])
        await #expect(throws: (any Error).self) { try await flush.value }
        try other.execute("ROLLBACK")
        other.close()
        try await engine.eraseAllData()
        let later = try recordEvents(engine, 1, prefix: "later")
        #expect(await Self.flushes(engine, 3))
        var named = 0
        for id in erased where try await !Self.rowsFound(for: id, engine).isEmpty { named += 1 }
        #expect(named == 0, "\(named) of the 3 erased events are named in upload_batches after the erasure")
        #expect(try await Self.rowsFound(for: later[0], engine).count == 1)
        await engine.close()
    }
}
