import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// D1–D9 and P2 (docs/BEHAVIOUR.md): the dispatcher rules, against the
/// real collector process. Serialized: the D9 notifier reaches every live
/// engine, which would flush the size and timer tests early.
@Suite(.serialized)
struct DispatcherRuleTests {
    @Test("D2: batchSize 10 by default; 1 sends each alone; 0 or less uses the default", .needsChildProcesses)
    func batchSizeRules() async throws {
        #expect(EngineConfiguration().uploadBatchSize == 10)
        #expect(EngineConfiguration(batchSize: 1).uploadBatchSize == 1)
        #expect(EngineConfiguration(batchSize: 0).uploadBatchSize == 10)
        #expect(EngineConfiguration(batchSize: -5).uploadBatchSize == 10)

        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let engine = uploadingEngine(directory, collector: collector, batchSize: 1)
        try await engine.start()
        for index in 0..<4 { try engine.record("single_\(index)") }
        try await engine.settle()
        // Bounded, and generous: the suite runs collector processes side by side.
        #expect(await collector.waitFor(timeout: 30) { $0.count >= 5 })
        #expect(collector.requests().map(\.ids.count) == [1, 1, 1, 1, 1], "session_start and four events, each alone")
        await engine.close()
    }

    @Test("P2, D2: a batch goes out when the pending count reaches batchSize, not before", .needsChildProcesses)
    func flushesBySize() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let engine = uploadingEngine(directory, collector: collector, batchSize: 10, timerInterval: 3_600)
        try await engine.start()
        for index in 0..<8 { try engine.record("e\(index)") }  // 9 with session_start
        try await engine.settle()
        #expect(try await engine.uploadStatistics().requests == 0, "below batchSize, before the timer")
        try engine.record("tenth")
        #expect(await collector.waitFor { !$0.isEmpty })
        // A flush started below the size would have sent the nine alone.
        #expect(collector.requests().first?.ids.count == 10)
        await engine.close()
    }

    @Test(
        "P2, D3: uploadInterval 60 s by default; 0 sends immediately; negative uses the default; the timer flushes",
        .needsChildProcesses)
    func timerRules() async throws {
        #expect(EngineConfiguration().uploadTimerInterval == 60)
        #expect(EngineConfiguration(uploadInterval: 0).uploadTimerInterval == 0)
        #expect(EngineConfiguration(uploadInterval: -1).uploadTimerInterval == 60)
        #expect(EngineConfiguration(uploadInterval: .infinity).uploadTimerInterval == 60)

        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let immediate = uploadingEngine(directory, collector: collector, batchSize: 10, timerInterval: 0)
        try await immediate.start()
        #expect(await collector.waitFor { $0.flatMap(\.ids).count >= 1 }, "session_start went out alone")
        try immediate.record("right_away")
        #expect(await collector.waitFor { $0.flatMap(\.ids).count >= 2 })
        await immediate.close()

        let timedDirectory = TemporaryDirectory()
        let timedCollector = try await TestCollector(timedDirectory)
        // The engine's clock moves only when the test moves it: the timer
        // cannot fire between start() and the two records, however slow
        // the machine.
        let clock = ManualClock()
        let timed = uploadingEngine(
            timedDirectory, collector: timedCollector, batchSize: 100, timerInterval: 0.3, clock: clock)
        try await timed.start()
        try timed.record("a")
        try timed.record("b")
        try await timed.settle()
        clock.advance(by: 0.2)
        try await timed.settle()
        #expect(try await timed.uploadStatistics().requests == 0, "not before the timer")
        clock.advance(by: 0.2)
        #expect(await timedCollector.waitFor(timeout: 5) { !$0.isEmpty })
        #expect(timedCollector.requests().first?.ids.count == 3)
        await timed.close()
    }

    @Test(
        "D4: maximumRetainedEvents 10000 by default bounds an uploading log; below 100 uses the default; below batchSize is raised; the oldest give way, counted",
        .needsChildProcesses)
    func queueSizeRules() async throws {
        #expect(EngineConfiguration().maximumRetainedEvents == 10_000)
        var uploading = EngineConfiguration.uploading(
            to: URL(string: "https://c.invalid")!, in: URL(fileURLWithPath: "/"))
        #expect(uploading.maximumRetainedEvents == 10_000 && uploading.retainedEvents == 10_000)
        uploading.maximumRetainedEvents = 99
        #expect(uploading.retainedEvents == 10_000, "below 100: the default")
        uploading.maximumRetainedEvents = 100
        #expect(uploading.retainedEvents == 100)
        (uploading.batchSize, uploading.maximumRetainedEvents) = (500, 200)
        #expect(uploading.retainedEvents == 500, "raised to batchSize")
        var listening = EngineConfiguration()
        listening.maximumRetainedEvents = 50
        #expect(listening.retainedEvents == 50, "without uploads, as set")

        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "status", "status": 500])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 10, maximumRetainedEvents: 100)
        try await engine.start()
        var ids: [String] = []
        for index in 0..<300 {
            let outcome = try engine.record("e\(index)")
            guard case .recorded(let id) = outcome else {
                Issue.record("record never blocks or refuses: \(outcome)")
                return
            }
            ids.append(id)
        }
        try await engine.settle()
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.pending <= 100)
        #expect(statistics.dropped >= 200)
        let dropped = try await engine.query {
            try $0.scalarInt("SELECT dropped FROM consumer_lag WHERE consumer = 'uploader'")
        }
        #expect(dropped == statistics.dropped, "visible at the CLI too")
        try await collector.control(["mode": "ok"])
        try await engine.flush()
        let accepted = Set(collector.acceptedIDs())
        #expect(ids.suffix(100).allSatisfy(accepted.contains), "the newest 100 were kept and uploaded")
        #expect(!accepted.contains(ids[0]), "the oldest gave way")
        await engine.close()
    }

    @Test(
        "D5: backingStore .file is the SQLite file named by dataStoreName, .memory keeps no file, .userDefaults maps to the file",
        .needsChildProcesses)
    func backingStores() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        for (store, name) in [(DataStoreType.file, "Queue"), (Self.userDefaults(), "Defaults"), (.memory, "Memory")] {
            let dispatcher = DefaultEventDispatcher(backingStore: store, dataStoreName: name)
            let location = dispatcher.databaseLocation(in: directory.url)
            let engine = EventEngine(
                configuration: .uploading(to: collector.url, dispatcher: dispatcher, in: directory.url))
            try await engine.start()
            try engine.record("stored_in_\(name)")
            await engine.close()
            let path = directory.file("\(name).sqlite").path
            if store != .memory {
                #expect(location == .file(directory.file("\(name).sqlite")))
                #expect(FileManager.default.fileExists(atPath: path))
                // It survives: a new engine on the same store still has the event queued.
                let again = EventEngine(
                    configuration: .uploading(to: collector.url, dispatcher: dispatcher, in: directory.url))
                try await again.start()
                #expect(try await again.storedNames().contains("stored_in_\(name)"))
                await again.close()
            } else {
                #expect(location == .inMemory)
                #expect(!FileManager.default.fileExists(atPath: path))
            }
        }
        #expect(DefaultEventDispatcher().dataStoreName == "OPTEventQueue")
    }

    /// The deprecated `.userDefaults`, named once, through a requirement that
    /// is not deprecated: the test still covers it without a warning.
    static func userDefaults() -> DataStoreType { LegacyStore.store(DeprecatedUserDefaults.self) }

    @Test("D6: no request body over 3.5 MB; a larger batch is split", .needsChildProcesses)
    func largeBatchesAreSplit() async throws {
        let directory = TemporaryDirectory()
        let (collector, requests, ids) = try await flushSixLargeEvents(directory)
        #expect(requests.count >= 2)
        #expect(requests.allSatisfy { $0.bytes <= 3_500_000 }, "\(requests.map(\.bytes))")
        #expect(Set(ids).isSubset(of: Set(collector.acceptedIDs())))
    }

    @Test("D7: POST to the event's url, body as given, content-type application/json", .needsChildProcesses)
    func postsTheBodyAsGiven() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let dispatcher = DefaultEventDispatcher()
        let body = Data(#"{"exactly":"these bytes","n":[1,2.50,3]}"#.utf8)
        let outcome = await dispatcher.dispatch(body, to: collector.url)
        #expect(outcome.isSuccess)
        let request = try #require(collector.requests().first)
        #expect(request.method == "POST")
        #expect(request.content_type == "application/json")
        #expect(request.rawBody == body)

        // A non-2xx answer is reported as such, never as success.
        try await collector.control(["mode": "status", "status": 503, "retry_after": "7"])
        let failed = await dispatcher.dispatch(body, to: collector.url)
        #expect(!failed.isSuccess)
        guard case .response(503, let retryAfter, _) = failed else {
            Issue.record("\(failed)")
            return
        }
        #expect(retryAfter == 7)
    }

    final class RecordingDispatcher: EventDispatcher {
        let sent = Protected<[EventForDispatch]>([])
        let status: Protected<Int>
        let flushes = Protected(0)
        init(status: Int = 200) { self.status = Protected(status) }
        func dispatchEvent(event: EventForDispatch, completionHandler: DispatchCompletionHandler?) {
            sent.withLock { $0.append(event) }
            let status = self.status.withLock { $0 }
            DispatchQueue.global().async {
                completionHandler?(.response(status: status, retryAfter: nil, message: nil))
            }
        }
        func flushEvents() { flushes.withLock { $0 += 1 } }
    }

    @Test("D8: a custom dispatcher plugs in through the engine's configuration")
    func customDispatcher() async throws {
        let dispatcher = RecordingDispatcher(status: 500)
        let url = URL(string: "https://collector.invalid/batch")!
        let engine = EventEngine(
            configuration: EngineConfiguration(collectorURL: url, dispatcher: dispatcher, retryPolicy: fastRetry))
        try await engine.start()
        try engine.record("custom")
        await expectUploadDeferred { try await engine.flush() }
        #expect(try await engine.uploadStatistics().pending == 2, "a 5xx is never success")
        dispatcher.status.withLock { $0 = 200 }
        try await engine.flush()
        let bodies = dispatcher.sent.withLock { $0 }
        #expect(bodies.allSatisfy { $0.url == url })
        let last = try #require(bodies.last)
        let json = try JSONSerialization.jsonObject(with: last.body) as? [String: Any]
        let events = json?["events"] as? [[String: Any]]
        #expect(events?.map { $0["name"] as? String } == ["session_start", "custom"])
        #expect(json?["sentAt"] is String)
        #expect((json?["spool"] as? [String: Any])?["lost"] is [String: Int], "W4: the loss it reports")
        // The documented body: id, type, name, timestamp, age, session,
        // parameters and the identity it was recorded for.
        let custom = try #require(events?.last)
        #expect(
            Set(custom.keys) == ["id", "type", "name", "timestamp", "age", "session", "parameters", "anonymousId"])
        #expect((custom["id"] as? String).flatMap(UUID.init(uuidString:)) != nil)
        #expect((custom["timestamp"] as? String)?.hasSuffix("Z") == true)
        #expect(custom["session"] as? String == engine.currentSessionID)
        #expect(custom["parameters"] is [String: Any])
        #expect(try await engine.uploadStatistics().pending == 0)
        await engine.close()
    }

    @Test(
        "D9: entering background flushes; a notifier serves hosts that cannot observe the lifecycle",
        .needsChildProcesses)
    func backgroundFlush() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let engine = uploadingEngine(directory, collector: collector, batchSize: 50, timerInterval: 3_600)
        try await engine.start()
        try engine.record("before_background")
        try await engine.settle()
        #expect(try await engine.uploadStatistics().requests == 0, "nothing is due before the background")
        engine.applicationDidEnterBackground()
        #expect(await collector.waitFor { $0.flatMap(\.ids).count == 2 })
        #expect(collector.requests().count == 1, "both events in the one background request")

        engine.applicationDidBecomeActive()
        await engine.close()

        // The process-wide notifier, in a process of its own: it sends every
        // engine of its process to the background, which would reach other
        // tests' engines here.
        let child = try ProcessBoundaryTests.Child(
            [directory.file("notifier.sqlite").path, "notifier", "--notifier", collector.url.absoluteString],
            in: directory, name: "notifier")
        let lines = await child.finish(timeout: 60)
        let id = try #require(lines.first { $0.hasPrefix("ID ") }.map { String($0.dropFirst(3)) }, "\(lines)")
        #expect(lines.contains("SUSPENDED") && lines.last == "DONE", "\(lines)")
        #expect(collector.acceptedIDs().contains(id), "uploaded on entering the background, before suspending")
    }

    @Test(
        "D1: events recorded while the collector is unreachable stay queued across restarts and go out in order",
        .needsChildProcesses)
    func offlineAcrossRestarts() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        collector.stop()  // offline
        let first = uploadingEngine(directory, collector: collector, batchSize: 5, timerInterval: 0.2)
        try await first.start()
        let ids = try recordEvents(first, 20, prefix: "offline_", parameters: { _ in [:] })
        await expectUploadDeferred { try await first.flush() }
        await first.close()

        try await collector.restart()  // online again, same port
        let second = uploadingEngine(directory, collector: collector, batchSize: 5, timerInterval: 0.2)
        try await second.start()
        try await second.flush()
        let accepted = collector.acceptedIDs()
        let order = accepted.filter(Set(ids).contains)
        #expect(order == ids, "every offline event, once, in order")
        await second.close()
    }
}

/// A store named through a protocol, so that naming a deprecated case in a
/// test is not a warning.
private protocol LegacyStoreName { static var store: DataStoreType { get } }
private enum DeprecatedUserDefaults: LegacyStoreName {
    @available(*, deprecated, message: "names DataStoreType.userDefaults on purpose")
    static var store: DataStoreType { .userDefaults }
}
private enum LegacyStore {
    static func store<Name: LegacyStoreName>(_ name: Name.Type) -> DataStoreType { Name.store }
}
