import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Identity and context per event (I1–I4): each event keeps who and where
/// it was recorded for, through restarts, processes and uploads, tried
/// through the public API against the real collector process.
@Suite(.needsChildProcesses)
struct IdentityTests {
    /// The Segment format's items in the collector's log, in arrival order.
    static func segmentItems(_ collector: TestCollector) throws -> [[String: Any]] {
        try collector.requests().filter { $0.status == 200 }.flatMap { request -> [[String: Any]] in
            let body = try JSONSerialization.jsonObject(with: request.rawBody) as? [String: Any]
            return body?["batch"] as? [[String: Any]] ?? []
        }
    }

    static func segment() throws -> SegmentBatchFormat {
        try SegmentBatchFormat(writeKey: "wk", anonymousId: "stand-in")
    }

    @Test("I1: an account switch while offline, across a restart: events before it arrive as A's, after it as B's")
    func accountSwitchOffline() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["format": "segment", "write_key": "wk"])
        collector.stop()  // offline: nothing can be sent
        let first = uploadingEngine(directory, collector: collector, batchSize: 1_000, format: try Self.segment())
        try await first.start()
        try first.identify(userId: "user-A", traits: ["plan": "pro"])
        let before = try recordEvents(first, 50, prefix: "a_")
        let identityA = try await first.identity()
        first.reset()  // A signs out on the shared device
        try first.identify(userId: "user-B")
        let after = try recordEvents(first, 10, prefix: "b_")
        let identityB = try await first.identity()
        await first.close()
        #expect(identityA.userId == "user-A" && identityB.userId == "user-B")
        #expect(identityA.anonymousId != identityB.anonymousId, "reset() started a new anonymous id")

        // The next launch, online: B is signed in while A's events go out.
        try await collector.restart()
        try await collector.control(["format": "segment", "write_key": "wk"])
        let second = uploadingEngine(directory, collector: collector, batchSize: 1_000, format: try Self.segment())
        try await second.start()
        #expect(try await second.identity() == identityB, "the identity survives the restart")
        let later = try second.record("b_later")
        try await second.flush()
        #expect(collector.formatErrors().isEmpty, "\(collector.formatErrors())")
        let items = try Self.segmentItems(collector)
        func item(_ id: String) -> [String: Any]? { items.first { $0["messageId"] as? String == id } }
        for id in before {
            #expect(item(id)?["userId"] as? String == "user-A")
            #expect(item(id)?["anonymousId"] as? String == identityA.anonymousId)
        }
        for id in after {
            #expect(item(id)?["userId"] as? String == "user-B")
            #expect(item(id)?["anonymousId"] as? String == identityB.anonymousId)
        }
        if case .recorded(let id) = later { #expect(item(id)?["userId"] as? String == "user-B") }
        let identifies = items.filter { $0["type"] as? String == "identify" }
        #expect(identifies.map { $0["userId"] as? String } == ["user-A", "user-B"])
        #expect((identifies.first?["traits"] as? [String: Any])?["plan"] as? String == "pro")
        await second.close()
    }

    @Test("I1: reset() gives a new anonymous id, used from the next event on; events before keep theirs")
    func resetStartsANewAnonymousID() async throws {
        let directory = TemporaryDirectory()
        let listener = CollectingEvents()
        let engine = try await startedEngine(
            directory,
            before: { engine in
                engine.on(.everyEvent) { listener.append($0) }
            })
        try engine.identify(userId: "u1")
        let old = try await engine.identity()
        try engine.record("before_reset")
        engine.reset()
        try engine.record("after_reset")
        try await engine.settle()
        let new = try await engine.identity()
        #expect(new.anonymousId != old.anonymousId)
        #expect(new.userId == nil && new.traits.isEmpty)
        let seen = listener.events.withLock { $0 }
        let before = try #require(seen.first { $0.name == "before_reset" })
        let after = try #require(seen.first { $0.name == "after_reset" })
        #expect(before.anonymousId == old.anonymousId && before.userId == "u1")
        #expect(after.anonymousId == new.anonymousId && after.userId == nil)
        // Read back from the file, each event references its own row.
        let rows = try await engine.query { connection in
            try connection.readEvents(after: 0, limit: 100, now: 0).map { ($0.name, $0.identity?.anonymousID) }
        }
        #expect(rows.first { $0.0 == "before_reset" }?.1 == old.anonymousId)
        #expect(rows.first { $0.0 == "after_reset" }?.1 == new.anonymousId)
        await engine.close()
    }

    @Test("I1: identify before start(): the events waiting for it carry the user, over the file's anonymous id")
    func identifyBeforeStart() async throws {
        let directory = TemporaryDirectory()
        let earlier = try await startedEngine(directory)
        let original = try await earlier.identity()
        await earlier.close()
        let engine = EventEngine(configuration: EngineConfiguration(database: .file(directory.databaseURL)))
        try engine.identify(userId: "early")
        try engine.record("before_start")
        try await engine.start()
        try await engine.settle()
        let rows = try await engine.query { connection in
            try connection.readEvents(after: 0, limit: 20, now: 0).map {
                [$0.name, $0.identity?.userID ?? "-", $0.identity?.anonymousID ?? "-"]
            }
        }
        let anonymous = original.anonymousId
        #expect(rows.contains(["identify", "early", anonymous]))
        #expect(rows.contains(["before_start", "early", anonymous]))
        let now = try await engine.identity()
        #expect(now.userId == "early" && now.anonymousId == anonymous)
        await engine.close()
    }

    @Test("I2: another process's identify applies to the events this process records after it committed")
    func anotherProcessIdentifies() async throws {
        let directory = TemporaryDirectory()
        let engine = try await startedEngine(directory)
        let listener = CollectingEvents()
        engine.on(.everyEvent) { listener.append($0) }
        try await engine.recordDurably("before_other")
        let mine = try await engine.identity()

        let child = try ProcessBoundaryTests.Child(
            [directory.databaseURL.path, "child", "--identify", "user-from-child"], in: directory, name: "identify")
        let lines = await child.finish(timeout: 60)
        let identified = try #require(lines.first { $0.hasPrefix("IDENTIFIED ") })
        #expect(identified == "IDENTIFIED \(mine.anonymousId)", "one anonymous id for the file")

        try await engine.recordDurably("after_other")
        try await engine.settle()
        let seen = listener.events.withLock { $0 }
        #expect(seen.first { $0.name == "before_other" }?.userId == nil)
        #expect(seen.first { $0.name == "after_other" }?.userId == "user-from-child")
        let now = try await engine.identity()
        #expect(now.userId == "user-from-child" && now.traits["by"] == "child")
        #expect(now.anonymousId == mine.anonymousId)
        await engine.close()
    }

    @Test("I2: eraseAllData() erases identities and contexts from the file, -wal and -shm; consent keeps them")
    func erasureRemovesIdentities() async throws {
        let directory = TemporaryDirectory()
        let marker = "IDENTITYMARKER7"
        let engine = try await startedEngine(directory)
        try engine.identify(userId: "\(marker)-user", traits: ["email": .string("\(marker)@example.com")])
        try engine.setContext(EventContext(custom: ["device_name": .string("\(marker)-iPad")]))
        try await engine.recordDurably("screen_seen")
        let before = try await engine.identity()
        engine.setConsent(false)
        engine.setConsent(true)
        #expect(try await engine.identity() == before, "withdrawing consent does not change the identity")
        let database = directory.databaseURL
        #expect(PrivacyTests.occurrences(of: marker, besides: database).values.reduce(0, +) > 0)
        try await engine.eraseAllData()
        let found = PrivacyTests.occurrences(of: marker, besides: database)
        #expect(found.values.reduce(0, +) == 0, "marker occurrences after erasure: \(found)")
        let after = try await engine.identity()
        #expect(after.anonymousId != before.anonymousId && after.userId == nil, "a new anonymous id")
        let (identities, contexts) = try await engine.query { connection in
            (
                try connection.scalarInt("SELECT count(*) FROM identities"),
                try connection.scalarInt("SELECT count(*) FROM contexts")
            )
        }
        #expect(identities == 1 && contexts == 0)
        await engine.close()
    }

    @Test(
        "I10: while consent is withheld, identify, alias, reset and setContext write nothing to the file, -wal or -shm; given, the identity in force is written"
    )
    func noPersonalDataWithoutConsent() async throws {
        let directory = TemporaryDirectory()
        let marker = "NOCONSENTMARKER3"
        let database = directory.databaseURL
        func found() -> Int { PrivacyTests.occurrences(of: marker, besides: database).values.reduce(0, +) }
        // Not granted yet at the first launch: a change made before start().
        var configuration = EngineConfiguration(database: .file(database))
        configuration.consent = false
        let first = EventEngine(configuration: configuration)
        try first.identify(userId: "\(marker)-early")
        try await first.start()
        try first.identify(userId: "\(marker)-user", traits: ["email": .string("\(marker)@example.com")])
        try first.alias("\(marker)-alias")
        try first.setContext(EventContext(custom: ["device_name": .string("\(marker)-iPad")]))
        try first.record("not_recorded")
        let inMemory = try await first.identity()
        #expect(inMemory.userId == "\(marker)-alias" && inMemory.traits["email"] == .string("\(marker)@example.com"))
        _ = try await first.query { try $0.scalarInt("SELECT count(*) FROM identities") }
        #expect(found() == 0, "written while consent was withheld")
        first.reset()
        await first.close()
        #expect(found() == 0, "written at close")

        // Withdrawn later: the same.
        let second = try await startedEngine(directory)
        second.setConsent(false)
        try second.identify(userId: "\(marker)-second")
        _ = try await second.identity()
        #expect(found() == 0, "written after consent was withdrawn")
        // Given: the identity in force is written (the control).
        second.setConsent(true)
        #expect(try await second.identity().userId == "\(marker)-second")
        #expect(found() > 0, "written once consent is given")
        await second.close()
    }

    @Test("I3: the context is referenced per event, one row per distinct context, and stays with the event")
    func contextsAreSnapshots() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["format": "segment", "write_key": "wk"])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 100, format: try Self.segment())
        try await engine.start()
        let v1 = EventContext(app: ["version": "1.0"], os: ["name": "iOS"], locale: "fr-FR", custom: ["tier": "a"])
        try engine.setContext(v1)
        try engine.record("in_v1")
        try engine.setContext(EventContext(app: ["version": "2.0"]))
        try engine.record("in_v2")
        try engine.setContext(v1)  // v1 again: its row is reused
        try engine.record("in_v1_again")
        try await engine.flush()
        let items = try Self.segmentItems(collector)
        func context(_ name: String) -> [String: Any]? {
            items.first { $0["event"] as? String == name }?["context"] as? [String: Any]
        }
        #expect((context("in_v1")?["app"] as? [String: Any])?["version"] as? String == "1.0")
        #expect(context("in_v1")?["locale"] as? String == "fr-FR" && context("in_v1")?["tier"] as? String == "a")
        #expect((context("in_v2")?["app"] as? [String: Any])?["version"] as? String == "2.0")
        #expect(context("in_v2")?["locale"] == nil)
        #expect((context("in_v1_again")?["app"] as? [String: Any])?["version"] as? String == "1.0")
        #expect((context("in_v1")?["library"] as? [String: Any])?["name"] as? String == "spool")
        #expect(context("in_v1")?["sessionId"] as? String == engine.currentSessionID)
        let rows = try await engine.query { try $0.scalarInt("SELECT count(*) FROM contexts") }
        #expect(rows == 2)
        #expect(throws: SpoolError.self) { try engine.setContext(EventContext(custom: ["bad": .double(.nan)])) }
        await engine.close()
    }

    @Test(
        "I3: with setContext on one thread and record on several, no event carries an older context than one before it"
    )
    func contextNeverStepsBack() async throws {
        let directory = TemporaryDirectory()
        let engine = try await startedEngine(directory)
        let recorders = 4
        let events = 3_000
        let done = Protected(0)
        // Threads, not tasks: the cooperative pool runs as many tasks at once
        // as there are cores.
        let finished = DispatchGroup()
        finished.enter()
        Thread.detachNewThread {
            // Raises `v` until the recorders are done (a bounded loop).
            for value in 1...1_000_000 where done.withLock({ $0 }) < recorders {
                try? engine.setContext(EventContext(custom: ["v": .int(value)]))  // a valid context: never throws
            }
            finished.leave()
        }
        for recorder in 0..<recorders {
            finished.enter()
            Thread.detachNewThread {
                for index in 0..<events { _ = try? engine.record("r\(recorder)", parameters: ["i": .int(index)]) }
                done.withLock { $0 += 1 }
                finished.leave()
            }
        }
        await withCheckedContinuation { continuation in finished.notify(queue: .global()) { continuation.resume() } }
        try await engine.settle()
        let values = try await engine.query { connection in
            try connection.withStatement(
                """
                SELECT json_extract(c.context, '$.v') FROM events AS e JOIN contexts AS c ON c.id = e.context_id \
                WHERE e.name LIKE 'r%' ORDER BY e.seq
                """
            ) { statement in
                var values: [Int64] = []
                while try statement.step() { values.append(statement.int64(at: 0)) }
                return values
            }
        }
        #expect(values.count > recorders * events / 2, "most events were recorded with a context")
        let backwards = zip(values, values.dropFirst()).filter { $0.1 < $0.0 }.count
        #expect(backwards == 0, "\(backwards) events in log order carry an older context than the one before")
        await engine.close()
    }

    @Test("I3: a commit that rolls back forgets the rows it wrote: its events keep their own context when retried")
    func rolledBackCommitForgetsItsRows() async throws {
        let directory = TemporaryDirectory()
        let engine = try await startedEngine(directory)
        try await engine.query { try $0.capAtCurrentSize() }  // the next commit fails with SQLITE_FULL
        try engine.setContext(EventContext(custom: ["v": "first"]))
        try engine.record("big", parameters: ["pad": .string(String(repeating: "x", count: 50_000))])
        #expect(try await waitUntil { (engine.diagnosticCounts.occurrences[.commitFailed] ?? 0) > 0 })
        try engine.setContext(EventContext(custom: ["v": "second"]))
        try engine.record("after")
        try await engine.query { try $0.uncap() }
        try await engine.settle()
        let contexts = try await engine.query { connection in
            try connection.withStatement(
                "SELECT e.name, c.context FROM events AS e JOIN contexts AS c ON c.id = e.context_id ORDER BY e.seq"
            ) { statement in
                var rows: [String: String] = [:]
                while try statement.step() { rows[statement.string(at: 0)] = statement.string(at: 1) }
                return rows
            }
        }
        #expect(contexts == ["big": #"{"v":"first"}"#, "after": #"{"v":"second"}"#])
        await engine.close()
    }

    @Test("I4: the documented query 'every event of user X' answers at the sqlite3 CLI")
    func everyEventOfAUserAtTheCLI() async throws {
        let sqlite3 = try #require(DamagedFiles.sqlite3, "the sqlite3 CLI")
        let directory = TemporaryDirectory()
        let engine = try await startedEngine(directory)
        try engine.identify(userId: "alice")
        try engine.record("a1")
        try engine.screen("Home")
        try engine.identify(userId: "bob")
        try engine.record("b1")
        try await engine.settle()
        await engine.close()
        let query = """
            SELECT e.seq, e.type, e.name FROM events AS e JOIN identities AS i ON i.id = e.identity_id \
            WHERE i.user_id = 'alice' ORDER BY e.seq;
            """
        let result = try await runProcess(sqlite3, [directory.databaseURL.path, query])
        let lines = result.output.split(separator: "\n").map {
            $0.split(separator: "|").dropFirst().joined(separator: "|")
        }
        #expect(lines == ["identify|identify", "track|a1", "screen|Home"], "\(result)")
        let readable = try await runProcess(
            sqlite3, [directory.databaseURL.path, "SELECT user_id, type, name FROM events_readable WHERE name = 'b1';"])
        #expect(readable.output == "bob|track|b1\n")
    }
}

/// Keeps every event a registration receives.
final class CollectingEvents: Sendable {
    let events = Protected<[RecordedEvent]>([])
    func append(_ event: RecordedEvent) { events.withLock { $0.append(event) } }
}
