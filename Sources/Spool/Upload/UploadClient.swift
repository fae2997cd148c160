import Foundation
import SpoolStorage

/// What the uploader sends batches with: the format, the request options
/// and the transport, from a ``DefaultEventDispatcher``; or Spool's format
/// and any other ``EventDispatcher``.
struct UploadClient: Sendable {
    let format: any BatchFormat
    let sender: Sender
    /// The transport, when it can also answer through a callback (looked up
    /// once, not per request).
    let callbackTransport: (any CallbackUploadTransport)?
    let options: UploadRequestOptions
    let requestTimeout: TimeInterval
    /// Whether the uploader starts out gzipping.
    let compresses: Bool
    /// User-Agent, the format's headers and the static ones, merged once.
    private let fixedHeaders: [String: String]

    /// Where requests go.
    enum Sender: Sendable {
        /// Spool builds the whole request; the transport moves it.
        case transport(any UploadTransport)
        /// A dispatcher with the `EventDispatcher` contract: the body only, through its
        /// completion handler.
        case dispatcher(any EventDispatcher)
    }

    init(
        format: any BatchFormat, sender: Sender, options: UploadRequestOptions, requestTimeout: TimeInterval
    ) {
        self.format = format
        self.sender = sender
        if case .transport(let transport) = sender {
            callbackTransport = transport as? any CallbackUploadTransport
        } else {
            callbackTransport = nil
        }
        self.options = options
        self.requestTimeout = requestTimeout
        switch options.compression {
        case .automatic: compresses = format.compressesByDefault
        case .gzip: compresses = true
        case .identity: compresses = false
        }
        var headers = ["User-Agent": UploadRequestOptions.defaultUserAgent, "Content-Type": format.contentType]
        Self.merge(format.headers, into: &headers)
        Self.merge(options.headers, into: &headers)
        Self.removeSpoolsOwn(from: &headers)
        fixedHeaders = headers
    }

    /// A custom dispatcher keeps its contract: Spool's JSON body as given,
    /// no compression, no headers of Spool's.
    init(dispatcher: any EventDispatcher) {
        self.init(
            format: SpoolBatchFormat(), sender: .dispatcher(dispatcher),
            options: UploadRequestOptions(compression: .identity), requestTimeout: 60)
    }

    /// How one exchange ended.
    enum Answer: Sendable {
        /// `compressed`: whether the body that got this answer was gzipped.
        case response(UploadResponse, compressed: Bool)
        /// No answer, or no request (the header provider failed).
        case failed(String)
    }

    /// A dispatcher's outcome as an answer.
    static func answer(_ outcome: DispatchOutcome) -> Answer {
        switch outcome {
        case .response(let status, let retryAfter, let message):
            let response = UploadResponse(
                status: status, headers: retryAfter.map { ["Retry-After": String($0)] } ?? [:],
                body: Data((message ?? "").utf8))
            return .response(response, compressed: false)
        case .transportFailure(let reason):
            return .failed(reason)
        }
    }

    /// Which batch a request carries, how many times it went before, and
    /// the loss it reports: the `Idempotency-Key`, `X-Retry-Count` and
    /// `X-Spool-Loss` headers, so a collector can tell a retry from new
    /// events, take it once, and see what the device lost.
    struct Tag: Sendable, Hashable {
        /// The same on every send of the same events (``UploadBatch/key``).
        var batchID: String
        /// Sends of this batch before this one.
        var retries: Int
        /// The `X-Spool-Loss` value (``UploadBatch/lossHeader``); nil when
        /// the body carries the loss.
        var loss: String?
    }

    /// The header naming the batch a request carries.
    static let idempotencyHeader = "Idempotency-Key"
    /// The header counting the sends of the batch before this one.
    static let retryCountHeader = "X-Retry-Count"
    /// The header with the loss a request reports, for a format whose body
    /// does not carry it.
    static let lossHeader = "X-Spool-Loss"

    /// Whether the format's bodies carry the loss a request reports.
    var writesLossInBody: Bool { format is any LossReportingFormat }

    /// Builds the request for `body` (asking the header provider, gzipping
    /// when `compress`) and sends it through `transport`.
    func exchange(
        through transport: any UploadTransport, url: URL, body: Data, eventCount: Int, compress: Bool, tag: Tag?
    ) async -> Answer {
        await send(through: transport) {
            try await makeRequest(url: url, body: body, eventCount: eventCount, compress: compress, tag: tag)
        }
    }

    /// Builds a request with `build` (only the header provider throws
    /// there) and sends it through `transport`.
    private func send(
        through transport: any UploadTransport, _ build: () async throws -> (UploadRequest, compressed: Bool)
    ) async -> Answer {
        let (request, compressed): (UploadRequest, Bool)
        do {
            (request, compressed) = try await build()
        } catch {
            return .failed("the header provider failed: \(error)")
        }
        do {
            return .response(try await transport.send(request), compressed: compressed)
        } catch {
            return .failed(String(describing: error))
        }
    }

    /// The request for `body` as it is (gzipped already when `compressed`),
    /// built on the spot; nil when the header provider must be asked first.
    func immediateRequest(url: URL, body: Data, compressed: Bool = false, eventCount: Int, tag: Tag?)
        -> UploadRequest?
    {
        guard options.headerProvider == nil else { return nil }
        var headers = fixedHeaders
        if compressed { headers["Content-Encoding"] = "gzip" }
        return request(url: url, headers: headers, body: body, eventCount: eventCount, tag: tag)
    }

    /// A request with this client's timeout and network policy, tagged
    /// with its batch when it carries one of the uploader's.
    private func request(url: URL, headers: [String: String], body: Data, eventCount: Int, tag: Tag?) -> UploadRequest {
        var headers = headers
        if let tag {
            HTTPHeaders.set(Self.idempotencyHeader, tag.batchID, in: &headers)
            HTTPHeaders.set(Self.retryCountHeader, String(tag.retries), in: &headers)
            HTTPHeaders.set(Self.lossHeader, tag.loss, in: &headers)
        }
        return UploadRequest(
            url: url, headers: headers, body: body, eventCount: eventCount, timeout: requestTimeout,
            allowsExpensiveNetworkAccess: options.allowsExpensiveNetworkAccess,
            allowsConstrainedNetworkAccess: options.allowsConstrainedNetworkAccess)
    }

    /// A callback transport's result as an answer to a request whose body
    /// was gzipped when `compressed`.
    static func answer(_ result: Result<UploadResponse, any Error>, compressed: Bool = false) -> Answer {
        switch result {
        case .success(let response): return .response(response, compressed: compressed)
        case .failure(let error): return .failed(String(describing: error))
        }
    }

    /// The request for `body`, and whether it went out gzipped.
    func makeRequest(url: URL, body: Data, eventCount: Int, compress: Bool, tag: Tag?) async throws
        -> (UploadRequest, Bool)
    {
        var headers = try await headers()
        var sent = body
        // A body zlib cannot compress (out of memory) goes as it is.
        let gzipped = compress ? Gzip.compress(body) : nil
        if let gzipped {
            sent = gzipped
            headers["Content-Encoding"] = "gzip"
        }
        return (request(url: url, headers: headers, body: sent, eventCount: eventCount, tag: tag), gzipped != nil)
    }

    /// The request for a body built (and perhaps gzipped) earlier, a batch
    /// handed to the system: this launch's headers, the same batch id.
    func storedRequest(url: URL, body: Data, compressed: Bool, eventCount: Int, tag: Tag) async throws
        -> UploadRequest
    {
        var headers = try await headers()
        if compressed { headers["Content-Encoding"] = "gzip" }
        return request(url: url, headers: headers, body: body, eventCount: eventCount, tag: tag)
    }

    /// ``storedRequest(url:body:compressed:eventCount:tag:)`` sent through
    /// `transport`.
    func exchangeStored(
        through transport: any UploadTransport, url: URL, body: Data, compressed: Bool, eventCount: Int, tag: Tag
    ) async -> Answer {
        await send(through: transport) {
            let request = try await storedRequest(
                url: url, body: body, compressed: compressed, eventCount: eventCount, tag: tag)
            return (request, compressed)
        }
    }

    /// The fixed headers with the header provider's.
    private func headers() async throws -> [String: String] {
        var headers = fixedHeaders
        if let provider = options.headerProvider {
            Self.merge(try await provider(), into: &headers)
            Self.removeSpoolsOwn(from: &headers)
        }
        return headers
    }

    /// `Content-Encoding` and `Content-Length` must match the body, and
    /// `Idempotency-Key`, `X-Retry-Count` and `X-Spool-Loss` the batch: they
    /// are Spool's (and the transport's), never the format's or the user's,
    /// in any spelling. A user's key on every request would make a
    /// deduplicating collector drop new batches as repeats.
    private static func removeSpoolsOwn(from headers: inout [String: String]) {
        for name in ["Content-Encoding", "Content-Length", idempotencyHeader, retryCountHeader, lossHeader] {
            HTTPHeaders.set(name, nil, in: &headers)
        }
    }

    private static func merge(_ layer: [String: String], into headers: inout [String: String]) {
        for (name, value) in layer { HTTPHeaders.set(name, value, in: &headers) }
    }
}
