import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// A temporary directory for one test's database files, removed when the
/// value goes away.
final class TemporaryDirectory: Sendable {
    let url: URL

    init(_ label: String = #function) {
        let name = "spool-test-\(label.filter { $0.isLetter || $0.isNumber })-\(UUID().uuidString.prefix(8))"
        url = FileManager.default.temporaryDirectory.appendingPathComponent(name)
        try! FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit {
        try? FileManager.default.removeItem(at: url)
    }

    /// A database file inside the directory (not created).
    var databaseURL: URL { url.appendingPathComponent("spool.sqlite") }

    /// The file a default ``DefaultEventDispatcher`` keeps its queue in, as
    /// ``EngineConfiguration/uploading(to:dispatcher:in:)`` does here.
    var defaultDataStoreURL: URL { file(DefaultEventDispatcher.defaultDataStoreName + ".sqlite") }

    func file(_ name: String) -> URL { url.appendingPathComponent(name) }
}

// MARK: - What the platform offers

/// Facilities some tests need and not every platform has. A test that needs
/// one carries the matching trait and is skipped, saying why, where it is
/// missing; the code that uses the facility sits behind `#if`.
enum TestFacilities {
    /// Child processes (`posix_spawn`): Linux and macOS have them;
    /// iOS, tvOS, watchOS and visionOS do not.
    static let canSpawnProcesses: Bool = {
        #if os(Linux) || os(macOS)
            return true
        #else
            return false
        #endif
    }()

    /// Thrown where a helper needs a facility the platform lacks (the trait
    /// normally skips the test first).
    struct Missing: Error, CustomStringConvertible {
        let description: String

        static let childProcesses = Missing(
            description: "needs child processes (posix_spawn), which iOS, tvOS, watchOS and visionOS lack")
    }
}

extension Trait where Self == ConditionTrait {
    /// Runs the test only where it can start child processes: the crash
    /// child, the sqlite3 CLI, the Python collector.
    static var needsChildProcesses: Self {
        .enabled(
            if: TestFacilities.canSpawnProcesses, Comment(rawValue: TestFacilities.Missing.childProcesses.description))
    }
}

/// Polls `condition` every `interval` until it holds or `timeout` passes —
/// for work that lands on another queue, task or process. Returns whether it
/// held; the caller's expectations say what a timeout means. The default
/// bound is generous (a condition that holds returns at once): under the
/// thread sanitizer, with the whole suite sharing two cores, an upload's
/// round trip to the collector can take more than 10 s. There `timeout` is
/// stretched by ``sanitizedPatience``.
@discardableResult
func waitUntil(timeout: TimeInterval = 30, interval: TimeInterval = 0.005, _ condition: () throws -> Bool)
    async throws -> Bool
{
    try await waitUntil(timeout: timeout, interval: interval, asking: { try condition() })
}

/// ``waitUntil(timeout:interval:_:)`` for a condition that has to await (a
/// question to the collector, an engine's statistics).
@discardableResult
func waitUntil(timeout: TimeInterval = 30, interval: TimeInterval = 0.005, asking condition: () async throws -> Bool)
    async throws -> Bool
{
    let deadline = Date().addingTimeInterval(timeout * sanitizedPatience)
    while try await !condition() {
        guard Date() < deadline else { return false }
        try await Task.sleep(nanoseconds: UInt64(interval * 1_000_000_000))
    }
    return true
}

/// Runs `body` on a thread of its own and waits for it without holding a
/// thread of the concurrency pool. That pool has one thread per core (two
/// here) for every test running at once: a blocking wait on it (a child
/// process starting, a poll on a pipe) stalls the other tests' tasks, their
/// retry timers and uploads among them.
func onOwnThread<Value: Sendable>(_ body: @escaping @Sendable () -> Value) async -> Value {
    await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: body()) }.start()
    }
}

/// The directory the test binaries and the package's executables are built into.
///
/// macOS loads the tests as a bundle, `…/debug/SpoolPackageTests.xctest`, into
/// a runner (xctest, swiftpm-testing-helper), so `Bundle.main` is the runner's;
/// the bundle that holds this code is the tests'. Linux runs the tests as an
/// executable, `…/debug/SpoolPackageTests.xctest`, which is `Bundle.main`'s.
var buildProductsDirectory: URL {
    let tests = Bundle(for: TemporaryDirectory.self).bundleURL
    if tests.pathExtension == "xctest" { return tests.resolvingSymlinksInPath().deletingLastPathComponent() }
    let executable =
        Bundle.main.executableURL
        ?? URL(
            fileURLWithPath: CommandLine.arguments[0],
            relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true))
    return executable.resolvingSymlinksInPath().deletingLastPathComponent()
}

/// A string `YYYY-MM-DDTHH:MM:SS.sssZ`: digits where digits go, the
/// separators in place, nothing more (no Regex: it needs macOS 13, above the
/// floor).
func isISOMilliseconds(_ value: Any?) -> Bool {
    guard let text = value as? String else { return false }
    let shape = Array("dddd-dd-ddTdd:dd:dd.dddZ".utf8)
    let bytes = Array(text.utf8)
    guard bytes.count == shape.count else { return false }
    return zip(bytes, shape).allSatisfy { byte, expected in
        expected == UInt8(ascii: "d") ? (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) : byte == expected
    }
}

/// A JSON object with `count` small parameters, as stored.
func sampleParameters(_ index: Int) -> String {
    #"{"index":\#(index),"screen":"home","price":9.99}"#
}

extension EventLog {
    /// Appends `count` events named `name` and waits for them to be durable.
    @discardableResult
    func appendDurably(_ count: Int, name: String = "test", startingAt start: Int = 0) async throws -> [AppendReceipt] {
        var receipts: [AppendReceipt] = []
        for index in start..<(start + count) {
            receipts.append(
                try append(
                    EventRecord(
                        name: name, parametersJSON: sampleParameters(index), recordedAt: Date().timeIntervalSince1970)))
        }
        try await waitUntilAllDurable()
        return receipts
    }
}

extension EventLog {
    /// How many events the last failed commit left buffered, as the log's
    /// failure handler reports it (0 before any failure).
    func bufferedAfterFailedCommits() -> Protected<Int> {
        let buffered = Protected(0)
        setFailureHandler { failure in
            if case .commitFailed(_, let count) = failure { buffered.withLock { $0 = count } }
        }
        return buffered
    }
}

/// Holds the first caller of ``pass()`` (a listener, a group reader) until
/// the test calls ``open()``; later callers go through. Bounded at 60 s, so
/// a failing test cannot hang the suite, and ``timedOut`` says if it was.
final class Gate: Sendable {
    private let state = Protected((reached: false, timedOut: false))
    private let semaphore = DispatchSemaphore(value: 0)

    /// Whether the first caller is held (or was).
    var reached: Bool { state.withLock { $0.reached } }
    /// Whether the first caller gave up waiting for ``open()``.
    var timedOut: Bool { state.withLock { $0.timedOut } }

    func pass() {
        let first = state.withLock { state in
            defer { state.reached = true }
            return !state.reached
        }
        guard first, semaphore.wait(timeout: .now() + 60) == .timedOut else { return }
        state.withLock { $0.timedOut = true }
    }

    func open() {
        semaphore.signal()
    }
}

/// A listener that keeps what it receives.
final class CollectingListener: EventListener {
    struct Received: Sendable, Hashable {
        let name: String
        let parameters: [String: EventValue]
        let timestamp: TimeInterval
    }

    let label: String
    let received = Protected<[Received]>([])
    let onEvent: (@Sendable (CollectingListener, Received) -> Void)?

    init(_ label: String = "", onEvent: (@Sendable (CollectingListener, Received) -> Void)? = nil) {
        self.label = label
        self.onEvent = onEvent
    }

    func onEventRecorded(_ event: RecordedEvent) {
        let received = Received(name: event.name, parameters: event.parameters, timestamp: event.timestamp)
        self.received.withLock { $0.append(received) }
        onEvent?(self, received)
    }

    var names: [String] { received.withLock { $0.map(\.name) } }
    /// Names without the engine's own session_start.
    var customNames: [String] { names.filter { $0 != EventEngine.sessionStartEventName } }
}

/// An engine on a temporary file (or in memory), started.
func startedEngine(
    _ directory: TemporaryDirectory? = nil, configure: (inout EngineConfiguration) -> Void = { _ in },
    before: (EventEngine) -> Void = { _ in }
) async throws -> EventEngine {
    var configuration = EngineConfiguration(database: directory.map { .file($0.databaseURL) } ?? .inMemory)
    configure(&configuration)
    let engine = EventEngine(configuration: configuration)
    before(engine)
    try await engine.start()
    return engine
}

extension Connection {
    /// Caps the database file at its current size, with the WAL checkpointed
    /// into it first: every commit that needs a new page fails with a real
    /// SQLITE_FULL.
    func capAtCurrentSize() throws {
        try execute("PRAGMA wal_checkpoint(TRUNCATE)")
        let pages = try scalarInt("PRAGMA page_count")
        _ = try scalarInt("PRAGMA max_page_count = \(pages)")
    }

    /// Lifts ``capAtCurrentSize()``: 1073741823 pages, far past any test's file.
    func uncap() throws {
        _ = try scalarInt("PRAGMA max_page_count = 1073741823")
    }
}

extension EventEngine {
    /// Runs SQL against the engine's database, on its queue.
    func query<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws -> T {
        let log = try #require(state.withLock { $0.log })
        return try await log.database.run(body)
    }

    /// The clocks a body the engine's uploader built now would carry.
    func batchClock() throws -> BatchClock {
        let log = try #require(state.withLock { $0.log })
        return BatchClock(configuration.clock, launch: log.launch)
    }

    func storedNames() async throws -> [String] {
        try await query { try $0.readEvents(after: 0, limit: .max, now: 0).map(\.name) }
    }
}

/// How many times longer a test waits under the thread sanitizer than its
/// stated bound. The whole suite then runs at once on two cores, each
/// thread several times slower, beside the collectors and child processes
/// it starts: a condition that holds within a second in a plain build can
/// take 40 s and more there. The bounds in the tests are a plain build's;
/// only how long a sanitized build waits for them grows.
let sanitizedPatience: Double = isThreadSanitized ? 5 : 1

/// Whether this build runs under the thread sanitizer (`swift test
/// --sanitize=thread`), whose shadow memory makes resident sizes meaningless.
let isThreadSanitized: Bool = {
    guard let program = dlopen(nil, RTLD_NOW) else { return false }
    defer { dlclose(program) }
    return dlsym(program, "__tsan_init") != nil
}()

// MARK: - Expected errors

/// Expects `body` to throw ``SpoolError/uploadDeferred(reason:)``, whatever
/// the reason.
func expectUploadDeferred<R>(
    _ comment: Comment? = nil, sourceLocation: SourceLocation = #_sourceLocation, _ body: () async throws -> R
) async {
    do {
        _ = try await body()
        Issue.record(
            "expected SpoolError.uploadDeferred, nothing was thrown: \(comment ?? "")", sourceLocation: sourceLocation)
    } catch SpoolError.uploadDeferred {
    } catch {
        Issue.record(
            "expected SpoolError.uploadDeferred, got \(error): \(comment ?? "")", sourceLocation: sourceLocation)
    }
}

/// Expects `body` to throw ``SpoolError/invalidSurvey(_:)``, whatever the
/// problem.
func expectInvalidSurvey<R>(sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> R) {
    do {
        _ = try body()
        Issue.record("expected SpoolError.invalidSurvey, nothing was thrown", sourceLocation: sourceLocation)
    } catch SpoolError.invalidSurvey {
    } catch {
        Issue.record("expected SpoolError.invalidSurvey, got \(error)", sourceLocation: sourceLocation)
    }
}

/// The SQLite result code `error` carries, if it is a ``SpoolError/sqlite(_:)``.
func sqliteCode(_ error: (any Error)?) -> SpoolError.SQLiteFailure.ResultCode? {
    guard case .sqlite(let failure)? = error as? SpoolError else { return nil }
    return failure.resultCode
}

/// A test's own failure to set up (a collector that did not start, a mount
/// refused), distinct from anything Spool throws.
struct TestSetupError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
