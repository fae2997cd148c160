import Foundation
import SpoolStorage

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The built-in dispatcher: storage choice, the collector's batch format,
/// and how requests are made.
///
/// The engine's uploader builds batches from the log by size
/// (``EngineConfiguration/batchSize``) and by timer
/// (``EngineConfiguration/uploadInterval``), writes each in `format`, gzips
/// it when the format and `request.compression` say so, adds the headers,
/// and sends it through the transport: Spool's own URLSession-based one, or
/// yours.
///
/// ```swift
/// let dispatcher = DefaultEventDispatcher(
///     format: try .segment(writeKey: "…", anonymousId: installationID),
///     request: UploadRequestOptions(allowsConstrainedNetworkAccess: false))
/// ```
public final class DefaultEventDispatcher: EventDispatcher {
    /// The database file's name unless you pass another: `OPTEventQueue`
    /// (`OPTEventQueue.sqlite`).
    @usableFromInline static let defaultDataStoreName = "OPTEventQueue"

    /// Where the queue is kept: a file (the default) or memory. Read by
    /// ``EngineConfiguration/uploading(to:dispatcher:in:)``, which turns it
    /// and `dataStoreName` into the configuration's `database`.
    let backingStore: DataStoreType
    /// The database file's name, without `.sqlite`. Read as `backingStore` is.
    let dataStoreName: String
    /// Seconds before a request with no answer counts as failed.
    let requestTimeout: TimeInterval
    /// How batches are written and what the collector's answers mean.
    var format: any BatchFormat { client.format }
    /// Headers, credentials, compression and networks for every request.
    var requestOptions: UploadRequestOptions { client.options }

    let client: UploadClient
    private let transport: any UploadTransport
    private let flushRequests = Protected<(@Sendable () -> Void)?>(nil)

    /// A dispatcher that sends with Spool's URLSession-based transport.
    ///
    /// - Parameters:
    ///   - backingStore: where the queue is kept (``DataStoreType``), through
    ///     ``EngineConfiguration/uploading(to:dispatcher:in:)``. A
    ///     configuration that sets `database` itself keeps that location; if
    ///     this and `dataStoreName` ask for another one (not their default),
    ///     `start()` throws
    ///     ``SpoolError/conflictingDatabaseLocation(configured:requested:)``
    ///     rather than ignore them.
    ///   - dataStoreName: the database file's name, without `.sqlite`
    ///     (default `OPTEventQueue`); empty uses the default. Read as
    ///     `backingStore` is.
    ///   - requestTimeout: seconds before a request with no answer counts as
    ///     failed (its events are retried).
    ///   - format: the collector's batch format: `.spool`
    ///     (``SpoolBatchFormat``, the default), `.segment(writeKey:…)`
    ///     (``SegmentBatchFormat``), `.kafkaREST` (``KafkaRESTBatchFormat``)
    ///     or yours.
    ///   - request: headers, a header provider, compression, networks.
    ///   - sessionConfiguration: for proxies, TLS settings, additional
    ///     headers… Copied; Spool sets the timeouts, as many connections
    ///     per host as requests may be in flight, and no cache. Nil: ephemeral, without cookies. Spool makes the
    ///     session itself and never takes a ready-made `URLSession`: its
    ///     delegate must refuse redirects, or a 301 would turn the upload
    ///     into a GET without its events and count as delivered. For a
    ///     session delegate of your own (certificate pinning) or a background
    ///     session, pass a transport of your own to the `transport:`
    ///     initializer, part of the transport authors' interface
    ///     (`@_spi(TransportAuthoring) import Spool`).
    public convenience init(
        backingStore: DataStoreType = .file,
        dataStoreName: String = DefaultEventDispatcher.defaultDataStoreName,
        requestTimeout: TimeInterval = 30,
        format: some BatchFormat = .spool,
        request: UploadRequestOptions = UploadRequestOptions(),
        sessionConfiguration: URLSessionConfiguration? = nil
    ) {
        let timeout = Self.clampedTimeout(requestTimeout)
        self.init(
            backingStore: backingStore, dataStoreName: dataStoreName, requestTimeout: timeout, format: format,
            request: request, transport: HTTPTransport(requestTimeout: timeout, configuration: sessionConfiguration))
    }

    /// A dispatcher that sends through `transport`: Spool still batches,
    /// writes the format, gzips, adds the headers, retries, splits and
    /// dead-letters; the transport only moves each request.
    @_spi(TransportAuthoring) public init(
        backingStore: DataStoreType = .file,
        dataStoreName: String = DefaultEventDispatcher.defaultDataStoreName,
        requestTimeout: TimeInterval = 30,
        format: some BatchFormat = .spool,
        request: UploadRequestOptions = UploadRequestOptions(),
        transport: any UploadTransport
    ) {
        self.backingStore = backingStore
        self.dataStoreName = dataStoreName.isEmpty ? Self.defaultDataStoreName : dataStoreName
        self.requestTimeout = Self.clampedTimeout(requestTimeout)
        self.transport = transport
        client = UploadClient(
            format: format, sender: .transport(transport), options: request, requestTimeout: self.requestTimeout)
    }

    /// Positive and at most a day: URLSession traps on huge or infinite timeouts.
    private static func clampedTimeout(_ timeout: TimeInterval) -> TimeInterval {
        timeout > 0 ? min(timeout, 86_400) : 30
    }

    /// The database this dispatcher's queue lives in, for a given directory.
    func databaseLocation(in directory: URL) -> DatabaseLocation {
        switch backingStore {
        case .memory: return .inMemory
        // `.file`, and the deprecated `.userDefaults`, which means it.
        default: return .file(directory.appendingPathComponent(dataStoreName + ".sqlite"))
        }
    }

    /// POSTs `event.body` unchanged (never compressed) to `event.url`, with
    /// the format's `Content-Type` (`application/json` for Spool's and
    /// Segment's) and the configured headers.
    public func dispatchEvent(event: EventForDispatch, completionHandler: DispatchCompletionHandler?) {
        let (client, transport) = (self.client, self.transport)
        // A task: the one way from this synchronous method to the async
        // transport; the completion handler carries the answer back.
        Task {
            let answer = await client.exchange(
                through: transport, url: event.url, body: event.body, eventCount: event.eventCount, compress: false,
                tag: nil)
            switch answer {
            case .response(let response, _):
                completionHandler?(
                    .response(status: response.status, retryAfter: response.retryAfter, message: response.message()))
            case .failed(let reason):
                completionHandler?(.transportFailure(reason))
            }
        }
    }

    /// Asks the engine that uses this dispatcher to upload what is queued now.
    public func flushEvents() {
        flushRequests.withLock { $0 }?()
    }

    /// Set by the engine's uploader.
    func setFlushHandler(_ handler: (@Sendable () -> Void)?) {
        flushRequests.withLock { $0 = handler }
    }
}
