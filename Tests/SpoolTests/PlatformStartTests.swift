import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Starting and closing on a platform that does not wait (O9–O11): a launch
/// in the background, a `close()` at every point where `start()` waits, and
/// engines that start while another process holds the file.
@Suite(.needsChildProcesses)
struct PlatformStartTests {
    @Test(
        "O9: a launch in the background: the app says so before start() (or the system while it opens), and once started the queue is uploaded and the database suspended"
    )
    func launchInTheBackground() async throws {
        for whileOpening in [false, true] {
            let directory = TemporaryDirectory()
            let collector = try await TestCollector(directory)
            // An earlier launch left events queued for the uploader: the
            // collector took none of them.
            try await collector.control(["mode": "status", "status": 503])
            let earlier = EventEngine(
                configuration: uploadingConfiguration(directory, collector: collector, batchSize: 1_000))
            try await earlier.start()
            let left = try recordEvents(earlier, 20)
            await earlier.close()
            try await collector.control(["mode": "ok"])
            #expect(Set(collector.acceptedIDs()).isDisjoint(with: left))

            let os = FakeOS()
            var configuration = uploadingConfiguration(directory, collector: collector, batchSize: 1_000).on(os)
            let engine = Protected<EventEngine?>(nil)
            if whileOpening {
                configuration.startStep = { step in if step == .uploaderStarted { os.send(.didEnterBackground) } }
            }
            engine.withLock { $0 = EventEngine(configuration: configuration) }
            let started = try #require(engine.withLock { $0 })
            // Launched by the system in the background (a background fetch,
            // a silent push): the app delegate says so first.
            if !whileOpening { started.applicationDidEnterBackground() }
            try await started.start()
            #expect(
                try await PlatformDayTests.waitUntilSuspended(started),
                "suspended after start (reported \(whileOpening ? "while opening" : "before start()"))")
            #expect(Set(collector.acceptedIDs()).isSuperset(of: left), "the queue went out first")
            #expect(try SuspensionTests.fileIsFree(directory.databaseURL.path))
            os.send(.didBecomeActive)
            #expect(try await PlatformDayTests.waitUntilSuspended(started, false))
            await started.close()
        }
    }

    @Test("O10: close() at every point where start() waits leaves nothing open and nothing observing")
    func closeAtEveryPointOfStart() async throws {
        for step in StartStep.allCases {
            let directory = TemporaryDirectory()
            let os = FakeOS()
            let box = Protected<EventEngine?>(nil)
            let closing = Protected<Task<Int, Never>?>(nil)
            var configuration = EngineConfiguration(database: .file(directory.databaseURL)).on(os)
            configuration.startStep = { reached in
                guard reached == step, let engine = box.withLock({ $0 }) else { return }
                closing.withLock { $0 = Task { await engine.close() } }
                // Go on once close() has begun: start() must notice it.
                // try?: only cancellation, which never comes; the checks below
                // hold whether or not close() had begun.
                _ = try? await waitUntil(timeout: 10, interval: 0.001) { engine.state.withLock { $0.isClosed } }
            }
            let engine = EventEngine(configuration: configuration)
            box.withLock { $0 = engine }
            engine.events.addDurableObserver(CollectingListener(), id: "at-\(step)")
            let outcome: Result<Void, any Error>
            do {
                try await engine.start()
                outcome = .success(())
            } catch {
                outcome = .failure(error)
            }
            _ = await closing.withLock { $0 }?.value
            if case .failure(let error) = outcome {
                #expect(error as? SpoolError == .closed, "\(step): start() threw \(error)")
            }
            #expect(os.observers == 0, "\(step): nothing observes the platform after close()")
            #expect(
                engine.state.withLock { if case .closed = $0.phase { return true } else { return false } },
                "\(step): closed")
            if let open = openFileDescriptors(under: directory.url) { #expect(open == 0, "\(step): files left open") }
            #expect(throws: SpoolError.closed) { try engine.record("after_close") }
            await #expect(throws: SpoolError.closed) { try await engine.start() }
            box.withLock { $0 = nil }
        }
    }

    @Test(
        "O11: eight engines starting while another process holds the file's open lock hold no thread of the cooperative pool"
    )
    func startsWaitOffThePool() async throws {
        let directory = TemporaryDirectory()
        let path = directory.databaseURL.path
        // The file exists, and its lock is another process's.
        await (try await startedEngine(directory)).close()
        let holder = try ProcessBoundaryTests.Child(
            [path, "holder", "--hold-open-lock"], in: directory, name: "holder")
        try #require(try await waitUntil(timeout: 30) { holder.lines().contains("LOCKED") })

        let engines = (0..<8).map { _ in
            EventEngine(configuration: EngineConfiguration(database: .file(directory.databaseURL)))
        }
        let starts = engines.map { engine in Task { try await engine.start() } }
        #if os(Linux)
            // Linux's executor adds threads when its own block, so the probe
            // below runs either way there: the threads say where the waits
            // are (where thread names reach /proc: not under the sanitizer).
            if Self.threadNamesAreVisible {
                // At least: another test's engine may be opening too.
                #expect(
                    try await waitUntil(timeout: 20) { Self.threads(named: "spool.open") >= engines.count },
                    "each start waits for the lock on a thread of its own")
            }
        #endif
        // Other async work runs while the starts wait: a probe on the pool
        // finishes, and releases the lock itself. A watchdog off the pool
        // releases it after 30 s (stretched by sanitizedPatience) if the
        // probe cannot run.
        let probe = Protected<Date?>(nil)
        let released = Protected<Date?>(nil)
        let probed = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            _ = probed.wait(timeout: .now() + 30 * sanitizedPatience)
            released.withLock { $0 = Date() }
            holder.sendSIGKILL()
        }
        Task.detached {
            await Task.yield()
            probe.withLock { $0 = Date() }
            probed.signal()
        }
        for start in starts { try await start.value }
        let (ran, freed) = (probe.withLock { $0 }, released.withLock { $0 })
        #expect(ran != nil && freed != nil && ran! <= freed!, "the probe ran while the lock was held")
        for engine in engines {
            try engine.record("started")
            await engine.close()
        }
    }

    #if os(Linux)
        /// Whether a name given to a thread shows in /proc (the thread
        /// sanitizer keeps it from the system).
        static let threadNamesAreVisible: Bool = {
            let seen = DispatchSemaphore(value: 0)
            let visible = Protected(false)
            Thread {
                Thread.current.name = "spool.probe"
                visible.withLock { $0 = threads(named: "spool.probe") == 1 }
                seen.signal()
            }.start()
            seen.wait()
            return visible.withLock { $0 }
        }()

        /// How many threads of this process have the name `name`.
        static func threads(named name: String) -> Int {
            let tasks = "/proc/self/task"
            guard let ids = try? FileManager.default.contentsOfDirectory(atPath: tasks) else { return -1 }  // try?: no /proc: unknown
            return ids.filter { id in
                // try?: a thread that ended meanwhile has no name to read.
                (try? String(contentsOfFile: "\(tasks)/\(id)/comm", encoding: .utf8))?
                    .trimmingCharacters(in: .whitespacesAndNewlines) == name
            }.count
        }
    #endif
}
