import Foundation
import Testing

@_spi(FormatAuthoring) @_spi(TransportAuthoring) @testable import Spool
@testable import SpoolStorage

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// How requests are made: headers and their layers, a header provider per
/// request, gzip and the fallback when a collector refuses it, the size bound
/// before compression, and a custom transport.
///
/// Bounded by the collector's waits and each request's timeout (Swift Testing's
/// `.timeLimit` needs iOS 16 / macOS 13, above the floor).
struct UploadRequestTests {
    // MARK: - Headers

    @Test(
        "headers are layered: User-Agent, the format's, static ones, then the provider's, asked per request",
        .needsChildProcesses)
    func headerLayers() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["format": "segment"])
        let calls = Protected(0)
        let options = UploadRequestOptions(
            headers: ["X-API-Key": "key-1", "authorization": "Bearer static", "Content-Encoding": "br"],
            headerProvider: {
                let call = calls.withLock { calls -> Int in
                    calls += 1
                    return calls
                }
                return ["X-Token": "token-\(call)", "X-API-Key": "key-from-provider"]
            })
        let engine = uploadingEngine(
            directory, collector: collector, batchSize: 2,
            format: try SegmentBatchFormat(writeKey: "wk", anonymousId: "a"), request: options)
        try await engine.start()
        _ = try recordEvents(engine, 5)
        try await engine.flush()
        let requests = collector.requests()
        #expect(requests.count == 3)
        #expect(collector.formatErrors().isEmpty, "\(collector.formatErrors())")
        #expect(requests.map { $0.header("X-Token") } == ["token-1", "token-2", "token-3"], "asked per request")
        #expect(requests.allSatisfy { $0.header("X-API-Key") == "key-from-provider" }, "the provider wins")
        #expect(requests.allSatisfy { $0.header("Authorization") == "Bearer static" }, "static replaces the format's")
        #expect(requests.allSatisfy { $0.content_encoding == "gzip" }, "Content-Encoding is always Spool's")
        #expect(requests.allSatisfy { $0.header("User-Agent") == UploadRequestOptions.defaultUserAgent })
        #expect(UploadRequestOptions.defaultUserAgent.hasPrefix("Spool/\(SpoolVersion.current) ("))
        await engine.close()
    }

    @Test(
        "a header provider that throws is a failed attempt: the events wait, and go out once it answers",
        .needsChildProcesses)
    func headerProviderFailure() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        struct TokenUnavailable: Error {}
        let calls = Protected(0)
        let options = UploadRequestOptions(headerProvider: {
            let call = calls.withLock { calls -> Int in
                calls += 1
                return calls
            }
            if call <= 2 { throw TokenUnavailable() }
            return ["Authorization": "Bearer fresh"]
        })
        let engine = uploadingEngine(
            directory, collector: collector, batchSize: 100, retry: RetryPolicy(initialDelay: 30), request: options)
        try await engine.start()
        let ids = try recordEvents(engine, 3)
        await expectUploadDeferred { try await engine.flush() }
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.pending == 4)
        #expect(statistics.lastFailure?.contains("header provider") == true, "\(statistics.lastFailure ?? "")")
        #expect(collector.requests().isEmpty, "nothing is sent without the headers")
        try await flushUntilDone(engine)
        #expect(collector.requests().map { $0.header("Authorization") } == ["Bearer fresh"])
        #expect(Set(collector.acceptedIDs()).isSuperset(of: ids))
        await engine.close()
    }

    @Test("dispatchEvent sends the body as given, uncompressed, with the configured headers", .needsChildProcesses)
    func dispatchEventUsesTheOptions() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let dispatcher = DefaultEventDispatcher(
            format: try SegmentBatchFormat(writeKey: "wk", anonymousId: "a"),
            request: UploadRequestOptions(headers: ["X-API-Key": "k"]))
        let body = Data(#"{"batch":[]}"#.utf8)
        let outcome = await dispatcher.dispatch(body, to: collector.url)
        #expect(outcome.isSuccess)
        let request = try #require(collector.requests().first)
        #expect(request.rawBody == body && request.content_encoding == nil)
        #expect(request.header("X-API-Key") == "k")
        #expect(request.header("Authorization") == "Basic " + Data("wk:".utf8).base64EncodedString())
    }

    @Test("the collector examples (Spool.docc/Collectors.md) build the dispatchers they describe")
    func collectorArticleExamples() throws {
        let segment = DefaultEventDispatcher(format: try .segment(writeKey: "YOUR_WRITE_KEY"))
        #expect(segment.format is SegmentBatchFormat)
        #expect(segment.format.headers["Authorization"]?.hasPrefix("Basic ") == true)
        let rudder = DefaultEventDispatcher(
            format: try .segment(writeKey: "RUDDER_SOURCE_WRITE_KEY"),
            request: UploadRequestOptions(compression: .identity))
        #expect(rudder.requestOptions.compression == .identity)
        let kafka = DefaultEventDispatcher(
            format: .kafkaREST,
            request: UploadRequestOptions(headers: [
                "Authorization": "Basic " + Data("user:password".utf8).base64EncodedString()
            ]))
        #expect(kafka.format is KafkaRESTBatchFormat && !kafka.format.compressesByDefault)
        var options = UploadRequestOptions(headers: ["X-API-Key": "k"])
        options.headerProvider = { ["Authorization": "Bearer token"] }
        options.allowsConstrainedNetworkAccess = false
        options.allowsExpensiveNetworkAccess = false
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpAdditionalHeaders = ["X-From-Configuration": "yes"]
        let custom = DefaultEventDispatcher(format: .spool, request: options, sessionConfiguration: configuration)
        #expect(custom.format is SpoolBatchFormat && custom.requestOptions.headers == ["X-API-Key": "k"])
        #expect(DefaultEventDispatcher().format.compressesByDefault, "Spool's format gzips by default")
    }

    @Test(
        "a session configuration is honoured (its additional headers arrive), and Spool still refuses redirects",
        .needsChildProcesses)
    func sessionConfiguration() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let other = try await TestCollector(directory)
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpAdditionalHeaders = ["X-From-Configuration": "yes"]
        let dispatcher = DefaultEventDispatcher(requestTimeout: 2, sessionConfiguration: configuration)
        try await collector.control([
            "mode": "redirect", "status": 302, "location": other.url.absoluteString, "times": 1,
        ])
        let body = Data(#"{"events":[]}"#.utf8)
        let redirected = await dispatcher.dispatch(body, to: collector.url)
        #expect(!redirected.isSuccess)
        #expect(other.requests().isEmpty, "the redirect was not followed")
        #expect(await dispatcher.dispatch(body, to: collector.url).isSuccess)
        #expect(collector.requests().map { $0.header("X-From-Configuration") } == ["yes", "yes"])
    }

    // MARK: - gzip

    @Test(
        "C1: a 415 to a gzipped body turns gzip off for good and resends at once, unless Accept-Encoding lists gzip",
        .needsChildProcesses, arguments: [("identity", true), ("", true), ("gzip", false)])
    func unsupportedEncoding(acceptEncoding: String, fallsBack: Bool) async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        var settings: [String: any Sendable] = ["refuse_gzip": true]
        if !acceptEncoding.isEmpty { settings["accept_encoding"] = acceptEncoding }  // else no header
        try await collector.control(settings)
        let engine = uploadingEngine(directory, collector: collector, batchSize: 3)
        try await engine.start()
        let ids = try recordEvents(engine, 5)
        if fallsBack {
            try await engine.flush()
        } else {
            await expectUploadDeferred { try await engine.flush() }
        }
        let requests = collector.requests()
        if fallsBack {
            #expect(requests.map(\.status) == [415, 200, 200])
            #expect(requests.map(\.content_encoding) == ["gzip", nil, nil], "identity for the rest of its life")
            try #require(requests.count >= 2)
            #expect(requests[0].rawBody == requests[1].rawBody || requests[0].ids.isEmpty, "the same batch again")
            let accepted = collector.acceptedIDs()
            #expect(Set(accepted).isSuperset(of: ids) && accepted.count == Set(accepted).count, "each once")
            #expect(try await engine.uploadStatistics().deadLettered == 0)
        } else {
            // The collector says it reads gzip: the 415 is about something
            // else, a refusal of the request. The events are kept.
            #expect(requests.allSatisfy { $0.status == 415 && $0.content_encoding == "gzip" })
            let statistics = try await engine.uploadStatistics()
            #expect(statistics.deadLettered == 0 && statistics.pending == 6)
            #expect(statistics.heldBack?.hasPrefix("HTTP 415") == true)
        }
        await engine.close()
    }

    @Test(
        "an identity upload (sent from the uploader's queue, no task) that hangs times out and is retried",
        .needsChildProcesses)
    func identityUploadHangs() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "hang", "times": 1, "hang_seconds": 3])
        let engine = uploadingEngine(
            directory, collector: collector, batchSize: 5, requestTimeout: 0.5,
            request: UploadRequestOptions(compression: .identity))
        try await engine.start()
        let ids = try recordEvents(engine, 4)
        try await flushUntilDone(engine)
        let requests = collector.requests()
        #expect(requests.first?.status == nil, "the first request got no answer")
        #expect(requests.count >= 2 && requests[1].t - requests[0].t >= 0.9, "it waited for the timeout")
        #expect(requests.allSatisfy { $0.content_encoding == nil })
        #expect(Set(collector.acceptedIDs()).isSuperset(of: ids))
        await engine.close()
    }

    @Test(
        "the 3.5 MB bound is on the body before compression: a batch that gzips small is still split",
        .needsChildProcesses)
    func boundBeforeCompression() async throws {
        let directory = TemporaryDirectory()
        let (collector, requests, ids) = try await flushSixLargeEvents(directory)
        #expect(requests.count >= 2, "split although all of it gzips to a few KB")
        #expect(requests.allSatisfy { $0.content_encoding == "gzip" && $0.bytes < 100_000 }, "\(requests.map(\.bytes))")
        #expect(
            requests.allSatisfy { ($0.decoded_bytes ?? .max) <= 3_500_000 }, "\(requests.map(\.decoded_bytes))")
        #expect(Set(collector.acceptedIDs()).isSuperset(of: ids))
    }

    // MARK: - A custom transport

    /// Answers from a script, then 200; keeps every request.
    final class ScriptedTransport: UploadTransport {
        enum Step: Sendable {
            case answer(Int, headers: [String: String] = [:], body: String = "")
            case fail
        }
        struct Offline: Error {}

        let script: Protected<[Step]>
        let received = Protected<[UploadRequest]>([])
        init(_ script: [Step]) { self.script = Protected(script) }

        func send(_ request: UploadRequest) async throws -> UploadResponse {
            received.withLock { $0.append(request) }
            let step = script.withLock { $0.isEmpty ? .answer(200) : $0.removeFirst() }
            switch step {
            case .fail: throw Offline()
            case .answer(let status, let headers, let body):
                return UploadResponse(status: status, headers: headers, body: Data(body.utf8))
            }
        }
    }

    func engine(transport: some UploadTransport, format: some BatchFormat = SpoolBatchFormat(), batchSize: Int = 100)
        -> EventEngine
    {
        // No timer pass: under a loaded run a test can outlast the default
        // 60 s, and a pass of its own would take the scripted answers.
        let dispatcher = DefaultEventDispatcher(
            backingStore: .memory, requestTimeout: 5, format: format,
            request: UploadRequestOptions(headers: ["X-Tenant": "t1"], allowsExpensiveNetworkAccess: false),
            transport: transport)
        return EventEngine(
            configuration: EngineConfiguration(
                collectorURL: URL(string: "https://collector.invalid/v1/batch")!, batchSize: batchSize,
                uploadInterval: 3_600, dispatcher: dispatcher,
                // Slow automatic retries: the tests flush themselves and look in between.
                retryPolicy: RetryPolicy(initialDelay: 30)))
    }

    @Test("a split renews the upload lease with each read, as the drain does")
    func splitsRenewTheLease() async throws {
        let directory = TemporaryDirectory()
        /// 413 for more than one event; a single event is accepted after
        /// reading when the upload lease expires, and takes a second of the
        /// engine's clock.
        final class SplittingTransport: UploadTransport {
            let path: String
            let clock: ManualClock
            let expiries = Protected<[Double]>([])
            init(path: String, clock: ManualClock) {
                self.path = path
                self.clock = clock
            }
            func send(_ request: UploadRequest) async throws -> UploadResponse {
                guard request.eventCount == 1 else { return UploadResponse(status: 413) }
                let connection = try Connection(path: path, options: ConnectionOptions())
                defer { connection.close() }
                let expires = try #require(try connection.lease(of: "uploader")).expires
                expiries.withLock { $0.append(expires) }
                clock.advance(by: 1)
                return UploadResponse(status: 200)
            }
        }
        let clock = ManualClock()
        let transport = SplittingTransport(path: directory.databaseURL.path, clock: clock)
        let dispatcher = DefaultEventDispatcher(requestTimeout: 5, transport: transport)
        var configuration = EngineConfiguration(
            database: .file(directory.databaseURL), collectorURL: URL(string: "https://collector.invalid/v1")!,
            batchSize: 100, dispatcher: dispatcher)
        configuration.clock = clock
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        let ids = try recordEvents(engine, 8)
        try await engine.flush()
        #expect(try await engine.uploadStatistics().pending == 0)
        let expiries = transport.expiries.withLock { $0 }
        #expect(expiries.count >= ids.count)
        // Renewed while the split ran: each read moved the expiry forward.
        let (first, last) = (try #require(expiries.first), try #require(expiries.last))
        #expect(last >= first + Double(expiries.count - 1), "\(expiries)")
        await engine.close()
    }

    @Test("a custom transport gets the finished request — gzipped body, every header — and its answers drive retries")
    func customTransport() async throws {
        let transport = ScriptedTransport([.fail, .answer(503, headers: ["Retry-After": "0"]), .answer(200)])
        let engine = engine(transport: transport)
        try await engine.start()
        let ids = try recordEvents(engine, 4)
        try await flushUntilDone(engine)
        let received = transport.received.withLock { $0 }
        #expect(received.count == 3, "a throw and a 503 keep the events; the third try delivers")
        let request = try #require(received.last)
        #expect(request.url.absoluteString == "https://collector.invalid/v1/batch")
        #expect(request.eventCount == 5)
        #expect(request.timeout == 5)
        #expect(!request.allowsExpensiveNetworkAccess && request.allowsConstrainedNetworkAccess)
        #expect(request.value(forHeader: "content-encoding") == "gzip")
        #expect(request.value(forHeader: "Content-Type") == "application/json")
        #expect(request.value(forHeader: "x-tenant") == "t1")
        #expect(request.value(forHeader: "User-Agent") == UploadRequestOptions.defaultUserAgent)
        let decoded = try #require(Gzip.decompress(request.body))
        let json = try #require(try JSONSerialization.jsonObject(with: decoded) as? [String: Any])
        #expect((json["events"] as? [[String: Any]])?.compactMap { $0["id"] as? String }.suffix(4) == ids[...])
        // The URLRequest a URLSession-based transport would send.
        let urlRequest = request.urlRequest
        #expect(urlRequest.httpMethod == "POST")
        #expect(urlRequest.value(forHTTPHeaderField: "X-Tenant") == "t1")
        #expect(urlRequest.timeoutInterval == 5)
        #expect(try await engine.uploadStatistics().pending == 0)
        await engine.close()
    }

    /// Spool's body, and a verdict that calls every answer a success.
    struct OverlyOptimisticFormat: BatchFormat {
        func appendPrologue(sentAt: Date, to body: inout [UInt8]) {
            SpoolBatchFormat().appendPrologue(sentAt: sentAt, to: &body)
        }
        func append(_ event: BatchEvent, to body: inout [UInt8]) { SpoolBatchFormat().append(event, to: &body) }
        func appendEpilogue(sentAt: Date, to body: inout [UInt8]) {
            SpoolBatchFormat().appendEpilogue(sentAt: sentAt, to: &body)
        }
        func verdict(for response: UploadResponse, eventCount: Int) -> UploadVerdict { .accepted }
    }

    @Test("only a 2xx is delivery, whatever a format says: a 500 or a 302 called accepted keeps the events")
    func nonSuccessIsNeverDelivery() async throws {
        for status in [500, 302] {
            let transport = ScriptedTransport([.answer(status)])
            let engine = engine(transport: transport, format: OverlyOptimisticFormat())
            try await engine.start()
            _ = try recordEvents(engine, 2)
            await expectUploadDeferred("HTTP \(status)") { try await engine.flush() }
            #expect(try await engine.uploadStatistics().pending == 3)
            try await engine.flush()
            #expect(transport.received.withLock { $0.count } == 2)
            #expect(try await engine.uploadStatistics().pending == 0)
            await engine.close()
        }
    }

    @Test("a transport's per-event results: a short list counts the missing events as retries")
    func shortPerEventList() async throws {
        struct HalfFormat: BatchFormat {
            func appendPrologue(sentAt: Date, to body: inout [UInt8]) {
                SpoolBatchFormat().appendPrologue(sentAt: sentAt, to: &body)
            }
            func append(_ event: BatchEvent, to body: inout [UInt8]) { SpoolBatchFormat().append(event, to: &body) }
            func appendEpilogue(sentAt: Date, to body: inout [UInt8]) {
                SpoolBatchFormat().appendEpilogue(sentAt: sentAt, to: &body)
            }
            func verdict(for response: UploadResponse, eventCount: Int) -> UploadVerdict {
                .perEvent(Array(repeating: .accepted, count: (eventCount + 1) / 2))
            }
        }
        let transport = ScriptedTransport([])
        let engine = engine(transport: transport, format: HalfFormat())
        try await engine.start()
        _ = try recordEvents(engine, 7)  // 8 with session_start
        try await flushUntilDone(engine)
        #expect(transport.received.withLock { $0.map(\.eventCount) } == [8, 4, 2, 1])
        #expect(try await engine.uploadStatistics().pending == 0)
        await engine.close()
    }
}
