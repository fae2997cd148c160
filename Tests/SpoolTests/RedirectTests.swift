import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Collectors that redirect, against real collector processes: a redirect
/// never counts as delivery, another origin never hears from Spool, and only
/// a same-origin 307 or 308 is followed, by Spool itself, with the body intact.
struct RedirectTests {
    /// Where the collector's `Location` points.
    enum Target: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case sameOrigin, otherOrigin
        var testDescription: String { rawValue }
    }

    static let redirectStatuses = [301, 302, 303, 307, 308]

    /// A batch body whose bytes must arrive unchanged: non-ASCII text and escapes.
    static let body = Data(
        #"{"sentAt":"2026-11-29T10:15:31.002Z","events":[{"id":"r1","name":"café ☕","parameters":{"s":"a\"b\\c"}}]}"#
            .utf8)

    /// The built-in dispatcher, a new one for each upload, as the uploader sends.
    static var dispatcher: DefaultEventDispatcher { DefaultEventDispatcher(requestTimeout: 2) }

    /// Where a redirect from `collector` points for `target`.
    func location(_ target: Target, collector: TestCollector, other: TestCollector) -> String {
        switch target {
        case .sameOrigin: return "http://127.0.0.1:\(collector.port)/other"
        case .otherOrigin: return "http://127.0.0.1:\(other.port)/collect"
        }
    }

    /// The text from `"events":` on, each event's age taken out: what must
    /// not change when a batch is sent again (its `sentAt` and the events'
    /// ages do, W5).
    func eventBytes(_ body: Data) -> String? {
        let text = String(decoding: body, as: UTF8.self)
        return text.range(of: #""events":"#).map {
            text[$0.lowerBound...].replacingOccurrences(of: #""age":[0-9]+,"#, with: "", options: .regularExpression)
        }
    }

    /// Text that needs escaping, so a re-sent body is compared byte for byte.
    static func parameters(_ index: Int) -> [String: EventValue] {
        ["text": .string("é\(index)\"")]
    }

    // MARK: - The transport

    @Test(
        "only a same-origin 307 or 308 is followed; every other redirect comes back as itself",
        .needsChildProcesses, arguments: redirectStatuses, Target.allCases)
    func redirectMatrix(status: Int, target: Target) async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let other = try await TestCollector(directory)
        let location = location(target, collector: collector, other: other)
        try await collector.control(["mode": "redirect", "status": status, "location": location, "times": 1])

        let outcome = await Self.dispatcher.dispatch(Self.body, to: collector.url)

        // The transport is done: nothing can still arrive anywhere.
        let requests = collector.requests()
        #expect(other.requests().isEmpty, "another origin never receives a request")
        if target == .sameOrigin && (status == 307 || status == 308) {
            #expect(outcome == .response(status: 200, retryAfter: nil, message: "{}"), "the follow-up's answer")
            #expect(requests.map(\.path) == ["/collect", "/other"])
            let followUp = try #require(requests.last)
            #expect(followUp.method == "POST")
            #expect(followUp.rawBody == Self.body, "the same bytes")
            #expect(followUp.content_type == "application/json")
        } else {
            #expect(!outcome.isSuccess)
            guard case .response(let answered, let retryAfter, let message?) = outcome else {
                Issue.record("\(outcome)")
                return
            }
            #expect(answered == status)
            #expect(retryAfter == nil)
            #expect(message.hasPrefix("redirect to \(location) not followed ("), "\(message)")
            #expect(requests.map(\.path) == ["/collect"], "not followed")
        }
    }

    @Test("a followed redirect reports the follow-up's answer, Retry-After included", .needsChildProcesses)
    func followUpAnswerIsTheOutcome() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control([
            "mode": "redirect", "status": 308, "location": "http://127.0.0.1:\(collector.port)/other",
            "path_status": ["/other": 503], "retry_after": "7",
        ])
        let outcome = await Self.dispatcher.dispatch(Self.body, to: collector.url)
        #expect(outcome == .response(status: 503, retryAfter: 7, message: "path status"))
        #expect(collector.requests().map(\.status) == [308, 503])
    }

    @Test("a relative Location on the same origin is followed", .needsChildProcesses)
    func relativeLocationIsFollowed() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "redirect", "status": 307, "location": "/other", "times": 1])
        let outcome = await Self.dispatcher.dispatch(Self.body, to: collector.url)
        #expect(outcome.isSuccess)
        let requests = collector.requests()
        #expect(requests.map(\.path) == ["/collect", "/other"])
        #expect(requests.allSatisfy { $0.method == "POST" && $0.rawBody == Self.body })
    }

    @Test("a redirect without a Location comes back as itself", .needsChildProcesses)
    func missingLocation() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "redirect", "status": 307, "times": 1])
        let outcome = await Self.dispatcher.dispatch(Self.body, to: collector.url)
        #expect(
            outcome
                == .response(
                    status: 307, retryAfter: nil, message: "redirect to (none) not followed (no Location header)"))
        #expect(collector.requests().count == 1)
    }

    @Test("a redirect loop stops after 3 hops and comes back as the 3xx, naming the hop limit", .needsChildProcesses)
    func redirectLoopStops() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        try await collector.control(["mode": "redirect", "status": 307, "location": collector.url.absoluteString])
        let outcome = await Self.dispatcher.dispatch(Self.body, to: collector.url)
        guard case .response(let status, let retryAfter, let message) = outcome else {
            Issue.record("\(outcome)")
            return
        }
        #expect(status == 307)
        #expect(retryAfter == nil)
        #expect(
            message == "redirect to \(collector.url.absoluteString) not followed (hop limit of 3 redirects reached)")
        let requests = collector.requests()
        #expect(requests.count == 4, "the first request and 3 hops")
        #expect(requests.allSatisfy { $0.method == "POST" && $0.rawBody == Self.body })
    }

    // MARK: - The policy

    @Test(
        "same origin means scheme, host and port equal, with default ports filled in",
        arguments: [
            ("http://h.example/collect", "http://h.example:80/other", true),
            ("https://H.example:443/a", "https://h.example/b", true),
            ("http://127.0.0.1:8080/a", "/b", true),
            ("http://h.example:8080/a", "http://h.example/a", false),
            ("http://h.example/a", "https://h.example/a", false),
            ("http://127.0.0.1:8080/a", "http://localhost:8080/a", false),
            ("http://h.example/a", "//other.example/a", false),
            ("http://h.example/a", "ftp://h.example/a", false),
        ])
    func sameOrigin(from: String, location: String, followed: Bool) throws {
        let url = try #require(URL(string: from))
        let decision = RedirectPolicy().decision(
            status: 307, location: location, requestURL: url, original: url, hops: 0)
        if case .follow = decision {
            #expect(followed, "\(decision)")
        } else {
            #expect(!followed, "\(decision)")
        }
    }

    @Test("statuses other than 307 and 308, bad Locations and the hop limit stop a redirect")
    func policyStops() throws {
        let url = try #require(URL(string: "http://127.0.0.1:8080/collect"))
        let policy = RedirectPolicy()
        func message(_ status: Int, _ location: String?, hops: Int = 0) -> String? {
            if case .stop(let message) = policy.decision(
                status: status, location: location, requestURL: url, original: url, hops: hops)
            {
                return message
            }
            return nil
        }
        for status in [300, 301, 302, 303, 304, 305] {
            #expect(
                message(status, "/other")?.hasPrefix("redirect to http://127.0.0.1:8080/other not followed") == true)
        }
        #expect(message(307, nil) == "redirect to (none) not followed (no Location header)")
        #expect(message(307, "  ") == "redirect to (none) not followed (no Location header)")
        #expect(message(307, "http://[bad") == "redirect to http://[bad not followed (the Location is not a valid URL)")
        #expect(message(308, "/other", hops: 2) == nil)
        #expect(message(308, "/other", hops: 3)?.hasSuffix("(hop limit of 3 redirects reached)") == true)
        let long = "/" + String(repeating: "x", count: 1_000)
        #expect((message(301, long)?.count ?? .max) < 400, "a long Location is cut")
    }

    // MARK: - The engine

    @Test(
        "a same-origin 307 or 308 delivers the batch once, to the new path, byte for byte", .needsChildProcesses,
        arguments: [307, 308])
    func engineFollowsSameOrigin(status: Int) async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let other = try await TestCollector(directory)
        try await collector.control([
            "mode": "redirect", "status": status, "location": "http://127.0.0.1:\(collector.port)/other", "times": 1,
        ])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 10, timerInterval: 3_600)
        try await engine.start()
        let ids = try recordEvents(engine, 3, prefix: "redirected", parameters: Self.parameters)
        try await engine.flush()

        let requests = collector.requests()
        #expect(requests.map(\.path) == ["/collect", "/other"])
        #expect(requests.map(\.status) == [status, 200])
        let (redirected, followUp) = (try #require(requests.first), try #require(requests.last))
        #expect(followUp.method == "POST")
        #expect(followUp.content_type == "application/json")
        #expect(followUp.rawBody == redirected.rawBody, "the same request, body intact")
        #expect(Set(ids).isSubset(of: followUp.ids))
        #expect(collector.acceptedIDs() == redirected.ids, "delivered exactly once")
        #expect(other.requests().isEmpty)
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.pending == 0)
        #expect(statistics.deadLettered == 0)
        await engine.close()
    }

    /// The redirects the transport does not follow, in every shape.
    static let unfollowed: [(Int, Target)] =
        redirectStatuses.flatMap { status in Target.allCases.map { (status, $0) } }
        .filter { !($0.1 == .sameOrigin && ($0.0 == 307 || $0.0 == 308)) }

    @Test(
        "a redirect that is not followed keeps the events, says where it pointed, and they go out once it stops",
        .needsChildProcesses, arguments: unfollowed)
    func engineKeepsEventsOnRedirect(status: Int, target: Target) async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let other = try await TestCollector(directory)
        let location = location(target, collector: collector, other: other)
        try await collector.control(["mode": "redirect", "status": status, "location": location, "times": 1])
        let engine = uploadingEngine(directory, collector: collector, batchSize: 10, timerInterval: 3_600)
        try await engine.start()
        let ids = try recordEvents(engine, 3, prefix: "redirected", parameters: Self.parameters)

        do {
            await expectUploadDeferred("a redirect is no delivery") { try await engine.flush() }
            let redirected = try #require(collector.requests().first)
            #expect(redirected.status == status)
            #expect(Set(ids).isSubset(of: redirected.ids))
            var statistics = try await engine.uploadStatistics()
            #expect(statistics.pending == redirected.ids.count, "every event kept")
            #expect(statistics.deadLettered == 0)
            let failure = try #require(statistics.lastFailure)
            #expect(failure.contains("redirect to \(location) not followed"), "\(failure)")

            // The collector stopped redirecting (times: 1): the next flush
            // (or the backoff's retry, whichever comes first) delivers.
            try await engine.flush()
            let delivered = collector.requests().filter { $0.status == 200 }
            #expect(delivered.count == 1)
            #expect(collector.acceptedIDs() == redirected.ids, "delivered exactly once")
            #expect(delivered.first.flatMap { eventBytes($0.rawBody) } == eventBytes(redirected.rawBody))
            statistics = try await engine.uploadStatistics()
            #expect(statistics.pending == 0)
            #expect(statistics.deadLettered == 0)
        }
        #expect(other.requests().isEmpty, "another origin never receives a request")
        await engine.close()
    }
}
