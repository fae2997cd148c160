import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Erasure, consent withdrawal and the file giving space back.
struct PrivacyTests {
    static let marker = "erase-me-7f3a9c"

    /// How often `marker` appears in the raw bytes of the database, its WAL
    /// and its shared-memory file.
    static func occurrences(of marker: String, besides database: URL) -> [String: Int] {
        let needle = Array(marker.utf8)
        var found: [String: Int] = [:]
        for suffix in ["", "-wal", "-shm"] {
            let path = database.path + suffix
            guard let data = FileManager.default.contents(atPath: path) else { continue }
            let bytes = [UInt8](data)
            var count = 0
            var index = 0
            while index + needle.count <= bytes.count {
                if bytes[index] == needle[0] && Array(bytes[index..<(index + needle.count)]) == needle {
                    count += 1
                    index += needle.count
                } else {
                    index += 1
                }
            }
            found[(database.lastPathComponent) + suffix] = count
        }
        return found
    }

    @Test(
        "eraseAllData leaves no trace of erased events in the database, -wal or -shm, with a durable listener attached and an upload in flight",
        .needsChildProcesses
    )
    func erasureLeavesNoTrace() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let listener = CollectingListener()
        let missed = Protected(0)
        // Nothing goes out before the flush below: its upload is the one in flight.
        let engine = uploadingEngine(directory, collector: collector, batchSize: 1_000, timerInterval: 3_600)
        engine.events.addDurableObserver(listener, id: "warehouse") { count in missed.withLock { $0 += count } }
        try await engine.start()
        let database = directory.defaultDataStoreURL
        for index in 0..<300 {
            try engine.record(
                Self.marker, parameters: ["email": .string("\(Self.marker)-\(index)@example.com"), "i": .int(index)])
        }
        try await engine.settle()
        #expect(Self.occurrences(of: Self.marker, besides: database).values.reduce(0, +) > 0, "the marker is on disk")

        // An upload in flight: the collector holds its answer for a while.
        try await collector.control(["mode": "hang", "hang_seconds": 1, "times": 1])
        let flush = Task { try? await engine.flush() }  // try?: the hung request fails; erasure is what is tested
        _ = await collector.waitFor { !$0.isEmpty }
        try await engine.eraseAllData()
        let erasedAt = Date().timeIntervalSince1970
        _ = await flush.value

        let found = Self.occurrences(of: Self.marker, besides: database)
        #expect(found.values.reduce(0, +) == 0, "marker occurrences after erasure: \(found)")
        // Nothing erased is uploaded after the call returned.
        try await engine.flush()
        let late = collector.requests().filter { $0.t > erasedAt && !$0.ids.isEmpty }
        #expect(late.isEmpty, "\(late.count) requests with events after erasure")
        #expect(try await engine.uploadStatistics().pending == 0)
        // The engine goes on: new events are stored, delivered and uploaded;
        // the durable listener is not told the erased events were dropped.
        listener.received.withLock { $0.removeAll() }
        try await engine.recordDurably("after_erasure")
        try await engine.settle()
        #expect(listener.customNames == ["after_erasure"])
        #expect(missed.withLock { $0 } == 0)
        try await engine.flush()
        #expect(collector.requests().last?.eventNames.contains("after_erasure") == true)
        await engine.close()
        #expect(Self.occurrences(of: Self.marker, besides: database).values.reduce(0, +) == 0)
    }

    @Test(
        "after setConsent(false), nothing recorded before is uploaded when consent returns, in this process or the next",
        .needsChildProcesses
    )
    func withdrawnConsentNeverUploadsWhatCameBefore() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "status", "status": 503])  // nothing gets through yet
        let first = uploadingEngine(directory, collector: collector, batchSize: 1_000, timerInterval: 3_600)
        try await first.start()
        for index in 0..<20 { try first.record("before_withdrawal", parameters: ["i": .int(index)]) }
        try await first.settle()
        first.setConsent(false)
        first.setConsent(true)  // back at once: the discard must still win
        try await collector.control(["mode": "ok"])
        try first.record("after_consent_returned")
        try await first.flush()
        await first.close()

        let second = uploadingEngine(directory, collector: collector, batchSize: 1_000, timerInterval: 3_600)
        try await second.start()
        try await second.flush()
        await second.close()
        let uploaded = collector.requests().filter { $0.status == 200 }.flatMap(\.eventNames)
        #expect(!uploaded.contains("before_withdrawal"), "\(uploaded)")
        #expect(uploaded.contains("after_consent_returned"))
    }

    @Test(
        "a second withdrawal while the first one's discard runs also reaches what was recorded in between",
        .needsChildProcesses
    )
    func aSecondWithdrawalDuringADiscardIsKept() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "status", "status": 503])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 1_000, timerInterval: 3_600)
        try await engine.start()
        _ = try recordEvents(engine, 10, prefix: "before_first")
        engine.setConsent(false)
        engine.setConsent(true)
        _ = try recordEvents(engine, 10, prefix: "between")
        engine.setConsent(false)  // the first discard has not been saved yet
        engine.setConsent(true)
        try await collector.control(["mode": "ok"])
        try engine.record("after_both")
        try await engine.flush()
        await engine.close()
        let uploaded = collector.requests().filter { $0.status == 200 }.flatMap(\.eventNames)
        #expect(!uploaded.contains { $0.hasPrefix("before_first") || $0.hasPrefix("between") }, "\(uploaded)")
        #expect(uploaded.contains("after_both"))
    }

    @Test(
        "setConsent(false) before start() discards the queue an earlier process left; starting with consent false keeps it",
        .needsChildProcesses
    )
    func withdrawalBeforeStartDiscardsTheEarlierQueue() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "status", "status": 503])
        let first = uploadingEngine(directory, collector: collector, batchSize: 1_000, timerInterval: 3_600)
        try await first.start()
        for index in 0..<20 { try first.record("queued_earlier", parameters: ["i": .int(index)]) }
        try await first.settle()
        await first.close()
        try await collector.control(["mode": "ok"])

        // Consent not granted yet at launch (configuration): the queue stays.
        var configuration = uploadingConfiguration(
            directory, collector: collector, batchSize: 1_000, timerInterval: 3_600)
        configuration.consent = false
        let undecided = EventEngine(configuration: configuration)
        try await undecided.start()
        #expect(try await undecided.uploadStatistics().pending >= 20)
        await undecided.close()

        // An explicit withdrawal before start: discarded when start opens it.
        let second = uploadingEngine(directory, collector: collector, batchSize: 1_000, timerInterval: 3_600)
        second.setConsent(false)
        second.setConsent(true)
        // Recorded after consent returned, before start: it waits for the
        // session and is committed during start(); the discard must not reach it.
        try second.record("before_start_after_consent")
        try await second.start()
        try second.record("after_consent_returned")
        try await second.flush()
        await second.close()
        let uploaded = collector.requests().filter { $0.status == 200 }.flatMap(\.eventNames)
        #expect(!uploaded.contains("queued_earlier"), "\(uploaded)")
        #expect(uploaded.contains("before_start_after_consent"), "\(uploaded)")
        #expect(uploaded.contains("after_consent_returned"))
    }

    @Test("eraseAllData() during a burst: Spool's own checkpointer never makes it fail with SQLITE_BUSY")
    func erasingDuringABurst() async throws {
        let directory = TemporaryDirectory()
        let engine = try await startedEngine(directory) { $0.maximumRetainedEvents = nil }
        let padding = String(repeating: "p", count: 1_500)
        let recorded = Protected(false)
        let recording = Task.detached {
            for index in 0..<8_000 {
                _ = try? engine.record("burst", parameters: ["i": .int(index), "p": .string(padding)])
            }
            recorded.withLock { $0 = true }
        }
        var failures: [String] = []
        for _ in 0..<6 {
            // Each erasure lands in the burst: a few hundred more events first.
            let seen = engine.eventLog?.acceptedCount ?? 0
            try await waitUntil(interval: 0.001) {
                (engine.eventLog?.acceptedCount ?? 0) >= seen + 300 || recorded.withLock { $0 }
            }
            do { try await engine.eraseAllData() } catch { failures.append("\(error)") }
        }
        await recording.value
        try await engine.settle()
        #expect(failures.isEmpty, "\(failures)")
        await engine.close()
    }

    /// Makes `folder` refuse to have entries removed, also for root (the
    /// immutable attribute where chmod does not hold); returns what undoes
    /// it, or nil when neither holds here.
    static func makeReadOnly(_ folder: URL) throws -> (() -> Void)? {
        let probe = folder.appendingPathComponent("probe-readonly")
        _ = FileManager.default.createFile(atPath: probe.path, contents: Data("p".utf8))
        func holds() -> Bool {
            guard unlink(probe.path) != 0 else {
                _ = FileManager.default.createFile(atPath: probe.path, contents: Data("p".utf8))
                return false
            }
            return true
        }
        chmod(folder.path, 0o555)
        if holds() {
            return {
                chmod(folder.path, 0o755)
                unlink(probe.path)
            }
        }
        chmod(folder.path, 0o755)
        if (try? runProcess("/usr/bin/chattr", ["+i", folder.path]))?.status == 0, holds() {  // try?: no chattr here
            return {
                // try?: undoing fails only where doing it failed.
                _ = try? runProcess("/usr/bin/chattr", ["-i", folder.path])
                unlink(probe.path)
            }
        }
        unlink(probe.path)
        return nil
    }

    @Test(
        "P9: eraseAllData() deletes every copy set aside at the database's path, damaged, newer or unrecognised, and a salvage's half-built file; one a read-only folder keeps makes it throw erasureIncomplete naming it"
    )
    func erasureDeletesEverySetAsideCopy() async throws {
        let directory = TemporaryDirectory()
        let engine = try await startedEngine(directory)
        let copies = DamagedCopies(databasePath: directory.databaseURL.path)
        func setAside() -> Set<String> {
            var files: Set<String> = []
            // A salvage killed between its renames leaves its fresh file
            // (the user's rows) at the building path.
            let paths =
                DamagedCopies.Kind.allCases.enumerated().map { index, kind in
                    copies.newPath(kind, at: Date(timeIntervalSince1970: 1_700_000_000 + Double(index)))
                } + [copies.buildingPath]
            for path in paths {
                for companion in ["", "-wal"] {
                    _ = FileManager.default.createFile(atPath: path + companion, contents: Data("user-data".utf8))
                    files.insert(path + companion)
                }
            }
            return files
        }
        let first = setAside()
        #expect(copies.list().count == 3)
        try await engine.eraseAllData()
        #expect(first.filter { FileManager.default.fileExists(atPath: $0) }.isEmpty, "every copy deleted")

        let second = setAside()
        guard let undo = try Self.makeReadOnly(directory.url) else {
            print("P9: no way to make a folder read-only here; the refusal is not checked")
            await engine.close()
            return
        }
        do {
            try await engine.eraseAllData()
            Issue.record("eraseAllData() reported success with copies left")
        } catch SpoolError.erasureIncomplete(let paths) {
            #expect(Set(paths) == second, "names every file left")
        }
        undo()
        try await engine.eraseAllData()
        #expect(second.filter { FileManager.default.fileExists(atPath: $0) }.isEmpty)
        await engine.close()
    }

    @Test(
        "eraseAllData: once it returns, no listener, durable or not, is given an erased event, even a slow one far behind"
    )
    func listenersGetNoErasedEventAfterTheCall() async throws {
        let directory = TemporaryDirectory()
        let returned = Protected(false)
        let late = Protected([String: Int]())
        func slow(_ label: String) -> CollectingListener {
            CollectingListener(label) { listener, received in
                if received.name.hasPrefix("erased"), returned.withLock({ $0 }) {
                    late.withLock { $0[listener.label, default: 0] += 1 }
                }
                usleep(1_000)
            }
        }
        let (durable, plain) = (slow("durable"), slow("plain"))
        let engine = try await startedEngine(
            directory, configure: { $0.maximumRetainedEvents = nil },
            before: {
                $0.events.addDurableObserver(durable, id: "warehouse")
                $0.events.addObserver(plain)
            })
        for index in 0..<2_000 { try engine.record("erased\(index)", parameters: ["email": .string(Self.marker)]) }
        try await engine.eraseAllData()
        returned.withLock { $0 = true }
        try engine.record("after")
        try await engine.settle()
        #expect(try await waitUntil(timeout: 30) { durable.names.last == "after" && plain.names.last == "after" })
        // The event each was handling as the call returned may finish.
        #expect(late.withLock { $0 }.values.allSatisfy { $0 <= 1 }, "\(late.withLock { $0 })")
        await engine.close()
    }

    @Test("withdrawConsent(erasingData: true) erases what is on disk; the default keeps the history")
    func withdrawingConsentCanErase() async throws {
        let directory = TemporaryDirectory()
        let engine = try await startedEngine(directory)
        try engine.record(Self.marker, parameters: ["email": .string(Self.marker)])
        try await engine.settle()
        try await engine.withdrawConsent()
        #expect(
            try await engine.surveys.evaluate(.eventFrequency(EventFrequency(Self.marker, .exactly, 1))),
            "the default keeps the history")
        try await engine.withdrawConsent(erasingData: true)
        #expect(try await engine.surveys.evaluate(.eventFrequency(EventFrequency(Self.marker, .exactly, 0))))
        await engine.close()
        #expect(Self.occurrences(of: Self.marker, besides: directory.databaseURL).values.reduce(0, +) == 0)
    }

    @Test(
        "after the queue drains, the file and its WAL give their space back without the app doing anything",
        .needsChildProcesses)
    func theFileShrinksBackAfterADrain() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        // Nothing gets through while the queue fills (size-triggered uploads
        // would otherwise drain part of it on a slow machine).
        try await collector.control(["mode": "status", "status": 503])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 1_000, timerInterval: 3_600)
        try await engine.start()
        try #require(engine.state.withLock { $0.log }).shrinkDelay = 0.2
        let database = directory.defaultDataStoreURL
        let padding = EventValue.string(String(repeating: "p", count: 1_000))
        for index in 0..<10_000 { try engine.record("bulk", parameters: ["i": .int(index), "pad": padding]) }
        try await engine.settle()
        func size() -> Int {
            ["", "-wal"].reduce(0) { total, suffix in
                let attributes = try? FileManager.default.attributesOfItem(atPath: database.path + suffix)
                return total + ((attributes?[.size] as? Int) ?? 0)
            }
        }
        let full = size()
        #expect(full > 10_000_000, "\(full) bytes with the queue full")
        try await collector.control(["mode": "ok"])
        try await engine.flush()
        try await waitUntil(timeout: 20, interval: 0.05) { size() <= 2_000_000 }
        print("file + WAL: \(full >> 10) KiB with 10,000 events queued, \(size() >> 10) KiB after the drain")
        #expect(size() < 2_000_000, "file + WAL after the drain: \(size()) bytes")
        await engine.close()
    }
}

extension TestCollector.Request {
    /// The event names in Spool's body format.
    var eventNames: [String] {
        guard let data = Data(base64Encoded: raw),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let events = object["events"] as? [[String: Any]]
        else { return [] }
        return events.compactMap { $0["name"] as? String }
    }
}
