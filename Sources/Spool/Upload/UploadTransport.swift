import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Sends Spool's upload requests: the way to plug in your own HTTP stack.
///
/// Part of the transport authors' interface, with ``UploadRequest``,
/// ``UploadResponse`` and the `transport:` initializer of
/// ``DefaultEventDispatcher``: `@_spi(TransportAuthoring) import Spool`.
///
/// Spool builds every request — the batch body in the collector's format,
/// gzip, `Content-Type`, authentication, `User-Agent`, your headers — and
/// hands it to the transport; the transport only moves bytes and reports the
/// collector's answer. Spool then acts on the answer exactly as with its own
/// transport: retries with backoff and `Retry-After`, splits, dead letters.
///
/// ```swift
/// struct LoggingTransport: UploadTransport {
///     let session: URLSession   // yours: pinned certificates, a proxy…
///     func send(_ request: UploadRequest) async throws -> UploadResponse {
///         let (data, response) = try await session.upload(for: request.urlRequest, from: request.body)
///         guard let http = response as? HTTPURLResponse else { throw URLError(.badServerResponse) }
///         print("upload of \(request.eventCount) events: HTTP \(http.statusCode)")
///         return UploadResponse(http, body: data)
///     }
/// }
/// let dispatcher = DefaultEventDispatcher(format: .segment(…), transport: LoggingTransport(session: pinned))
/// ```
///
/// ## Implementation requirements
///
/// - POST `request.body` to `request.url` byte for byte, with every header in
///   `request.headers` (they include `Content-Type` and, for a gzipped body,
///   `Content-Encoding: gzip`). Do not compress, re-encode or add to the body.
/// - Return the collector's answer for **any** HTTP status — 2xx, 3xx, 4xx,
///   5xx — with its headers (Spool reads `Retry-After` and `Accept-Encoding`)
///   and its body (the Kafka REST proxy reports failures per record in a 200
///   body; keeping the first ``UploadResponse/maximumBodyBytes`` is enough).
/// - Throw only when no HTTP answer arrived: offline, a refused or reset
///   connection, a timeout, a TLS failure. Spool keeps the events and retries
///   them with backoff, whatever the error.
/// - Do not follow redirects. A 301, 302 or 303 re-sends the upload as a GET
///   without its body, and FoundationNetworking re-sends even a 307 or 308
///   without it; the next server's 2xx would then look like delivery. Return
///   the 3xx: Spool keeps the events and retries. (With your own `URLSession`,
///   give it a delegate whose `willPerformHTTPRedirection` passes `nil`.)
/// - Give up after `request.timeout` seconds. Spool cancels the task after
///   about twice that and ignores a later answer (the events are sent again:
///   at least once).
/// - Spool sends one request at a time per engine; `send` may be called from
///   any task.
@_spi(TransportAuthoring) public protocol UploadTransport: Sendable {
    /// Sends `request` and returns the collector's answer, whatever its status.
    ///
    /// - Throws: only when there is no HTTP answer; the events are kept.
    func send(_ request: UploadRequest) async throws -> UploadResponse
}

/// A transport that can also answer through a callback. When a request needs
/// no work off the database queue (no header provider, no gzip), the
/// uploader sends it from its own queue this way: no task, and the answer
/// comes back with one thread hop instead of three. Spool's HTTP transport
/// adopts it; `package`, not public, so the public surface stays one method.
package protocol CallbackUploadTransport: UploadTransport {
    /// Sends `request` and calls `completion` exactly once, on any thread.
    ///
    /// - Returns: a closure that cancels the request (then `completion`
    ///   reports a failure, or is not called if it already was).
    func send(
        _ request: UploadRequest, completion: @escaping @Sendable (Result<UploadResponse, any Error>) -> Void
    ) -> @Sendable () -> Void
}

/// One upload, ready to go on the wire: a POST of `body` to `url`.
@_spi(TransportAuthoring) public struct UploadRequest: Sendable, Hashable {
    /// The collector endpoint (the engine's `collectorURL`).
    @_spi(TransportAuthoring) public var url: URL
    /// Every header to send, `Content-Type` included; `Content-Encoding: gzip`
    /// when the body is compressed.
    @_spi(TransportAuthoring) public var headers: [String: String]
    /// The bytes to send, exactly.
    @_spi(TransportAuthoring) public var body: Data
    /// How many events the body carries.
    @_spi(TransportAuthoring) public var eventCount: Int
    /// Seconds to wait for the answer.
    @_spi(TransportAuthoring) public var timeout: TimeInterval
    /// False: do not send over a network the system marks as expensive
    /// (cellular, a personal hotspot). Apple platforms only.
    @_spi(TransportAuthoring) public var allowsExpensiveNetworkAccess: Bool
    /// False: do not send while the user has turned on Low Data Mode. Apple
    /// platforms only.
    @_spi(TransportAuthoring) public var allowsConstrainedNetworkAccess: Bool

    /// A request as Spool builds it (or a test does).
    @_spi(TransportAuthoring) public init(
        url: URL, headers: [String: String], body: Data, eventCount: Int, timeout: TimeInterval = 30,
        allowsExpensiveNetworkAccess: Bool = true, allowsConstrainedNetworkAccess: Bool = true
    ) {
        self.url = url
        self.headers = headers
        self.body = body
        self.eventCount = eventCount
        self.timeout = timeout
        self.allowsExpensiveNetworkAccess = allowsExpensiveNetworkAccess
        self.allowsConstrainedNetworkAccess = allowsConstrainedNetworkAccess
    }

    /// The value of header `name`, compared case-insensitively.
    @_spi(TransportAuthoring) public func value(forHeader name: String) -> String? {
        HTTPHeaders.value(name, in: headers)
    }
}

/// A collector's answer to an upload: what a transport returns and what a
/// batch format's verdict reads.
@_spi(FormatAuthoring) @_spi(TransportAuthoring) public struct UploadResponse: Sendable, Hashable {
    /// The most of a response body Spool keeps: enough for the per-record
    /// results of a few thousand records.
    @_spi(FormatAuthoring) @_spi(TransportAuthoring) public static let maximumBodyBytes = 1 << 20

    /// The HTTP status.
    @_spi(FormatAuthoring) @_spi(TransportAuthoring) public var status: Int
    /// The response headers.
    @_spi(FormatAuthoring) @_spi(TransportAuthoring) public var headers: [String: String]
    /// The start of the response body (at most ``maximumBodyBytes``).
    @_spi(FormatAuthoring) @_spi(TransportAuthoring) public var body: Data
    /// Spool's own explanation, when its transport stopped a redirect.
    var note: String?

    /// An answer with `status`, `headers` and the start of `body` (cut at
    /// ``maximumBodyBytes``).
    @_spi(FormatAuthoring) @_spi(TransportAuthoring) public init(
        status: Int, headers: [String: String] = [:], body: Data = Data()
    ) {
        self.status = status
        self.headers = headers
        self.body = body.count > Self.maximumBodyBytes ? body.prefix(Self.maximumBodyBytes) : body
    }

    /// The answer in `response`, with the start of `body`.
    @_spi(FormatAuthoring) @_spi(TransportAuthoring) public init(_ response: HTTPURLResponse, body: Data?) {
        var headers: [String: String] = [:]
        for case (let name as String, let value as String) in response.allHeaderFields { headers[name] = value }
        self.init(status: response.statusCode, headers: headers, body: body ?? Data())
    }

    /// The value of header `name`, compared case-insensitively.
    @_spi(FormatAuthoring) @_spi(TransportAuthoring) public func value(forHeader name: String) -> String? {
        HTTPHeaders.value(name, in: headers)
    }

    /// `Retry-After`, in seconds: delta-seconds or an HTTP date.
    @_spi(FormatAuthoring) @_spi(TransportAuthoring) public var retryAfter: TimeInterval? {
        // clock-exempt: a real deadline, an HTTP date is a moment on the server's real clock.
        HTTPHeaders.retryAfter(value(forHeader: "Retry-After"), now: Date())
    }

    /// The body as text for a log line or a dead-letter reason: at most
    /// `limit` characters, whitespace trimmed; nil when empty.
    func message(limit: Int = 200) -> String? {
        if let note { return note }
        let text = String(decoding: body.prefix(limit * 4), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        guard !text.isEmpty else { return nil }
        return text.count > limit ? String(text.prefix(limit)) + "…" : text
    }
}

@_spi(TransportAuthoring)
extension UploadRequest {
    /// A `URLRequest` for `URLSession.upload(for:from:)`: POST, every header,
    /// the timeout and (on Apple platforms) the network policy. The body is
    /// not set: pass ``body`` to the upload call.
    @_spi(TransportAuthoring) public var urlRequest: URLRequest {
        var request = URLRequest(
            url: url, cachePolicy: .reloadIgnoringLocalCacheData,
            timeoutInterval: HTTPTransport.effectiveTimeout(timeout))
        request.httpMethod = "POST"
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        #if !canImport(FoundationNetworking)
            request.allowsExpensiveNetworkAccess = allowsExpensiveNetworkAccess
            request.allowsConstrainedNetworkAccess = allowsConstrainedNetworkAccess
        #endif
        return request
    }
}

/// Header helpers shared by requests and responses.
enum HTTPHeaders {
    static func value(_ name: String, in headers: [String: String]) -> String? {
        if let exact = headers[name] { return exact }
        return headers.first { sameName($0.key, name) }?.value
    }

    /// `headers` with `name` set to `value`, replacing any spelling of it.
    static func set(_ name: String, _ value: String?, in headers: inout [String: String]) {
        for key in headers.keys where sameName(key, name) { headers[key] = nil }
        if let value { headers[name] = value }
    }

    /// Header names compare ASCII case-insensitively (RFC 9110); no
    /// Foundation call per comparison, as this runs for every request.
    static func sameName(_ a: String, _ b: String) -> Bool {
        guard a.utf8.count == b.utf8.count else { return false }
        return zip(a.utf8, b.utf8).allSatisfy { x, y in
            x == y || (x | 0x20 == y | 0x20 && (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(x | 0x20))
        }
    }

    /// `Retry-After` as seconds: either delta-seconds or an HTTP date.
    static func retryAfter(_ header: String?, now: Date) -> TimeInterval? {
        guard let header = header?.trimmingCharacters(in: .whitespaces), !header.isEmpty else { return nil }
        if let seconds = TimeInterval(header) { return seconds.isFinite ? max(0, seconds) : nil }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: header) else { return nil }
        return max(0, date.timeIntervalSince(now))
    }
}
