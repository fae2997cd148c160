import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The real HTTP collector process (Tests/Collector/collector.py) on a free
/// 127.0.0.1 port.
final class TestCollector: @unchecked Sendable {
    // Safe: `process` is replaced only by `stop()`/`restart()`, which tests call
    // from one task.
    #if os(Linux) || os(macOS)
        private var process: ChildProcess?
    #endif
    private(set) var port: Int
    let logURL: URL
    /// While stopped: a socket bound to the port and not listening, so
    /// connections are refused and no other test's collector takes the port.
    private var placeholder: Int32 = -1

    struct Request: Decodable, Sendable {
        let t: Double
        let status: Int?
        /// On the wire.
        let bytes: Int
        /// After the collector decoded `Content-Encoding`.
        let decoded_bytes: Int?
        /// Event ids in the body, from the format's place for them.
        let ids: [String]
        /// The ids the collector took (all of a 2xx answer's, less the
        /// records a Kafka REST answer failed).
        let accepted: [String]?
        /// The decoded body, base64.
        let raw: String
        let method: String
        let path: String
        let content_type: String?
        let content_encoding: String?
        /// Every request header, names in lower case.
        let headers: [String: String]?
        /// What the body or headers got wrong for the collector's format.
        let format_errors: [String]?
        /// It carried the Idempotency-Key of a batch the collector took
        /// before: answered 200, nothing taken.
        let duplicate: Bool?
        /// The loss the request reports, by cause (W4), and where it was:
        /// "body" or "header".
        let loss: [String: Int]?
        let carrier: String?
        /// Each event's time as the collector corrects it (W5).
        let clock: [Correction]?

        /// One event's time, corrected to the collector's clock when the
        /// request arrived (`t`), in seconds since 1970.
        struct Correction: Decodable, Sendable {
            let id: String?
            let timestamp: Double?
            /// Milliseconds, and "monotonic" or "wall".
            let age: Int?
            let ageClock: String?
            let sentAt: Double?
            /// `t` less the age.
            let byAge: Double?
            /// `t` less (sentAt less timestamp).
            let bySentAt: Double?

            enum CodingKeys: String, CodingKey {
                case id, timestamp, age
                case ageClock = "age_clock"
                case sentAt = "sent_at"
                case byAge = "by_age"
                case bySentAt = "by_sent_at"
            }
        }

        /// Whether the collector took it (a 2xx, not a duplicate): what it
        /// reports counts.
        var taken: Bool { (status ?? 0) / 100 == 2 && duplicate != true }

        /// The body as the collector parsed it (decoded when gzipped).
        var rawBody: Data { Data(base64Encoded: raw) ?? Data() }
        var acceptedIDs: [String] { accepted ?? (((status ?? 0) / 100 == 2) ? ids : []) }
        func header(_ name: String) -> String? { headers?[name.lowercased()] }
    }

    static var script: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Collector").appendingPathComponent("collector.py").path
    }

    /// Starts the collector and waits (at most 10 s) for it to listen.
    init(_ directory: TemporaryDirectory, port: Int = 0) async throws {
        logURL = directory.file("collector-\(UUID().uuidString.prefix(6)).jsonl")
        _ = FileManager.default.createFile(atPath: logURL.path, contents: nil)
        self.port = port
        try await launch()
    }

    deinit {
        stop()
        releasePort()
    }

    /// Seconds the collector process lives, so that none outlives a test run
    /// that died: longer than any test. Under the thread sanitizer, with the
    /// suite's tests in parallel, one of a second or two can take over 300 s.
    private static let lifetime = isThreadSanitized ? 1_200 : 300

    /// How many collectors may be starting at once: dozens of tests start
    /// one at the same moment, and Python's start-up is CPU work.
    private static let starting = DispatchSemaphore(value: 3)

    private func launch() async throws {
        #if os(Linux) || os(macOS)
            let arguments = [
                "python3", Self.script, "--log", logURL.path, "--port", String(port), "--lifetime",
                String(Self.lifetime),
            ]
            let output = try ChildProcess.pipe()
            // Started, and its "PORT n" waited for (bounded), on a thread of
            // its own, a few at a time.
            let (process, text) = await onOwnThread { () -> (ChildProcess?, String) in
                Self.starting.wait()
                defer { Self.starting.signal() }
                defer { close(output.read) }
                let process: ChildProcess
                do {
                    defer { close(output.write) }
                    process = try ChildProcess("/usr/bin/env", arguments, standardOutput: output.write)
                } catch {
                    return (nil, "\(error)")
                }
                return (process, readFirstLine(output.read, timeout: 30))
            }
            guard let process, let line = text.split(separator: "\n").first, line.hasPrefix("PORT "),
                let port = Int(line.dropFirst(5))
            else {
                process?.send(SIGKILL)
                process?.waitUntilExit()
                throw TestSetupError("the test collector did not start: \(text)")
            }
            self.port = port
            self.process = process
        #else
            throw TestFacilities.Missing.childProcesses
        #endif
    }

    /// The collector is down: the port refuses connections, and stays this
    /// collector's until ``restart()``.
    func stop() {
        #if os(Linux) || os(macOS)
            guard let process else { return }
            process.send(SIGKILL)
            process.waitUntilExit()
            self.process = nil
            holdPort()
        #endif
    }

    /// Binds the port without listening (connections get a reset, as from a
    /// closed port).
    private func holdPort() {
        #if os(Linux)
            let socketType = Int32(SOCK_STREAM.rawValue)
        #else
            let socketType = SOCK_STREAM
        #endif
        let descriptor = socket(AF_INET, socketType, 0)
        guard descriptor >= 0 else { return }
        var on: Int32 = 1
        setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        if bound == 0 { placeholder = descriptor } else { close(descriptor) }
    }

    private func releasePort() {
        if placeholder >= 0 { close(placeholder) }
        placeholder = -1
    }

    /// Up again on the same port, with the same log.
    func restart() async throws {
        stop()
        releasePort()
        // The port may take a moment to be free again.
        var failure: (any Error)?
        let launched = try await waitUntil(timeout: 2, interval: 0.1) {
            do {
                try await launch()
                return true
            } catch {
                failure = error
                return false
            }
        }
        if !launched, let failure { throw failure }
    }

    var url: URL { URL(string: "http://127.0.0.1:\(port)/collect")! }

    /// Changes the collector's behaviour (see collector.py).
    ///
    /// - Returns: how many requests mode "hold" is holding now.
    @discardableResult
    func control(_ settings: [String: any Sendable]) async throws -> Int {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/_control")!)
        request.httpMethod = "POST"
        request.httpBody = try JSONSerialization.data(withJSONObject: settings)
        request.timeoutInterval = 5
        let (data, response) = try await URLSession.shared.data(for: request)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        let answer = try JSONSerialization.jsonObject(with: data) as? [String: Any]
        return answer?["held"] as? Int ?? 0
    }

    /// Polls (bounded) until mode "hold" holds at least `count` requests.
    func waitForHeld(_ count: Int = 1, timeout: TimeInterval = 30) async throws -> Bool {
        try await waitUntil(timeout: timeout, interval: 0.02, asking: { try await self.control([:]) >= count })
    }

    /// Every request it received, in arrival order.
    func requests() -> [Request] {
        guard let text = try? String(contentsOf: logURL, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { try? JSONDecoder().decode(Request.self, from: Data($0.utf8)) }
    }

    /// Ids of events the collector took, in arrival order (with repeats).
    func acceptedIDs() -> [String] {
        requests().flatMap(\.acceptedIDs)
    }

    /// Every format error the collector found, with the request's index.
    func formatErrors() -> [String] {
        requests().enumerated().flatMap { index, request in
            (request.format_errors ?? []).map { "request \(index): \($0)" }
        }
    }

    /// Polls (bounded) until `condition` holds on the received requests.
    @discardableResult
    func waitFor(timeout: TimeInterval = 30, _ condition: ([Request]) -> Bool) async -> Bool {
        // try?: a cancelled wait answers with one last look.
        let held = try? await waitUntil(timeout: timeout, interval: 0.02) { condition(requests()) }
        return held == true || condition(requests())
    }
}

extension EventDispatcher {
    /// Dispatches `body` to `url` and waits for the completion handler's outcome.
    func dispatch(_ body: Data, to url: URL) async -> DispatchOutcome {
        await withCheckedContinuation { continuation in
            dispatchEvent(event: EventForDispatch(url: url, body: body)) { continuation.resume(returning: $0) }
        }
    }
}

/// A fast retry policy for tests: 50 ms doubling to 400 ms.
/// The request timeout of ``uploadingEngine``: short, so a lost answer is
/// retried soon; wider under the thread sanitizer, where an exchange with
/// the loopback collector can take seconds.
let defaultRequestTimeout: TimeInterval = isThreadSanitized ? 10 : 2

let fastRetry = RetryPolicy(initialDelay: 0.05, maximumDelay: 0.4, multiplier: 2, jitter: 0.5...1.0)

/// An engine on a file, uploading to `collector`. Its timer waits an hour
/// unless a test asks for another: tests flush themselves, and a timer
/// pass of its own (a loaded sanitized run outlasts a minute) would send
/// events before the test has scripted the collector's answers.
func uploadingEngine(
    _ directory: TemporaryDirectory, collector: TestCollector, batchSize: Int = 10, timerInterval: TimeInterval = 3_600,
    maximumRetainedEvents: Int = 10_000, requestTimeout: TimeInterval = defaultRequestTimeout,
    retry: RetryPolicy = fastRetry,
    format: some BatchFormat = SpoolBatchFormat(), request: UploadRequestOptions = UploadRequestOptions(),
    path: String = "/collect", clock: (any SpoolClock)? = nil
) -> EventEngine {
    EventEngine(
        configuration: uploadingConfiguration(
            directory, collector: collector, batchSize: batchSize, timerInterval: timerInterval,
            maximumRetainedEvents: maximumRetainedEvents, requestTimeout: requestTimeout, retry: retry, format: format,
            request: request,
            path: path, clock: clock))
}

/// The configuration ``uploadingEngine`` starts from, to change before use.
func uploadingConfiguration(
    _ directory: TemporaryDirectory, collector: TestCollector, batchSize: Int = 10, timerInterval: TimeInterval = 3_600,
    maximumRetainedEvents: Int = 10_000, requestTimeout: TimeInterval = defaultRequestTimeout,
    retry: RetryPolicy = fastRetry,
    format: some BatchFormat = SpoolBatchFormat(), request: UploadRequestOptions = UploadRequestOptions(),
    path: String = "/collect", clock: (any SpoolClock)? = nil
) -> EngineConfiguration {
    let dispatcher = DefaultEventDispatcher(requestTimeout: requestTimeout, format: format, request: request)
    let url = URL(string: "http://127.0.0.1:\(collector.port)\(path)")!
    var configuration = EngineConfiguration.uploading(to: url, dispatcher: dispatcher, in: directory.url)
    configuration.batchSize = batchSize
    configuration.uploadInterval = timerInterval
    configuration.maximumRetainedEvents = maximumRetainedEvents
    configuration.retryPolicy = retry
    if let clock { configuration.clock = clock }  // a ManualClock: the test moves time
    return configuration
}

/// Reads until the first newline or `timeout`, retrying on EINTR (Foundation's
/// `availableData` traps on an interrupted read).
func readFirstLine(_ descriptor: Int32, timeout: TimeInterval) -> String {
    var bytes: [UInt8] = []
    let deadline = Date().addingTimeInterval(timeout)
    var buffer = [UInt8](repeating: 0, count: 256)
    while !bytes.contains(UInt8(ascii: "\n")) && Date() < deadline {
        var descriptors = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        let ready = poll(&descriptors, 1, 100)
        if ready < 0 && errno == EINTR { continue }
        guard ready > 0 else { continue }
        let count = read(descriptor, &buffer, buffer.count)
        if count < 0 && errno == EINTR { continue }
        guard count > 0 else { break }
        bytes.append(contentsOf: buffer[0..<count])
    }
    return String(decoding: bytes, as: UTF8.self)
}

/// Six events of 900 KB each (5.4 MB, over the 3.5 MB bound for a request
/// body), recorded with batchSize 10 and flushed to a new collector: the
/// collector (alive while the caller holds it), what it received, and the
/// events' ids.
func flushSixLargeEvents(_ directory: TemporaryDirectory) async throws -> (
    collector: TestCollector, requests: [TestCollector.Request], ids: [String]
) {
    let collector = try await TestCollector(directory)
    let engine = uploadingEngine(directory, collector: collector, batchSize: 10, timerInterval: 3_600)
    try await engine.start()
    let blob = String(repeating: "x", count: 900_000)
    let ids = try recordEvents(engine, 6, prefix: "big_", parameters: { _ in ["blob": .string(blob)] })
    try await engine.flush()
    await engine.close()
    return (collector, collector.requests(), ids)
}

/// Records `count` events named `<prefix><index>` and returns their ids in
/// record order.
func recordEvents(
    _ engine: EventEngine, _ count: Int, prefix: String = "e",
    parameters: (Int) -> [String: EventValue] = { ["i": .int($0)] }
) throws -> [String] {
    try (0..<count).compactMap { index in
        if case .recorded(let id) = try engine.record("\(prefix)\(index)", parameters: parameters(index)) {
            return id
        }
        return nil
    }
}

/// Retries `flush()` (at most `attempts` times, 100 ms apart) until it
/// succeeds; past that, one more try's error is thrown.
func flushUntilDone(_ engine: EventEngine, attempts: Int = 40) async throws {
    var tries = 0
    var done = false
    try await waitUntil(timeout: 120, interval: 0.1) {
        tries += 1
        guard tries <= attempts else { return true }
        do {
            try await engine.flush()
            done = true
        } catch SpoolError.uploadDeferred {}
        return done
    }
    if !done { try await engine.flush() }
}
