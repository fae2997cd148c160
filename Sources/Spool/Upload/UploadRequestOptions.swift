import Foundation

/// Spool's version, in the `User-Agent` and Segment's `context.library`.
/// The one place it is written: bump it with each release.
enum SpoolVersion {
    static let current = "0.1.0"
}

/// How the built-in dispatcher's requests are made: headers, credentials,
/// compression and the networks they may use.
///
/// ```swift
/// var options = UploadRequestOptions(headers: ["X-API-Key": apiKey])
/// options.headerProvider = { ["Authorization": "Bearer " + (try await tokens.fresh())] }
/// options.allowsExpensiveNetworkAccess = false   // Wi-Fi and wired only
/// let dispatcher = DefaultEventDispatcher(request: options)
/// ```
///
/// Headers are layered: `User-Agent` (``defaultUserAgent``), then the
/// format's (`Content-Type`, its authentication), then ``headers``, then what
/// ``headerProvider`` returns; a later layer replaces an earlier one's header
/// of the same name, whatever its case. `Content-Encoding` and
/// `Content-Length` are always Spool's: they must match the body; so are
/// `Idempotency-Key`, `X-Retry-Count` and `X-Spool-Loss`, which name the
/// batch (a header of yours by any of these names, in any case, is dropped).
public struct UploadRequestOptions: Sendable {
    /// Headers on every request (an API key, a tenant id…).
    public var headers: [String: String]
    /// Called before every request, including retries, for headers that
    /// change: a token that expires. A throw is a failed attempt: the events
    /// stay queued and are retried with backoff (the provider is asked again).
    /// Called from Spool's tasks, one request at a time; keep it quick.
    public var headerProvider: (@Sendable () async throws -> [String: String])?
    /// Whether bodies are gzipped; `.automatic` follows the format.
    public var compression: UploadCompression
    /// False: requests wait for a network the system does not mark as
    /// expensive (cellular, a personal hotspot). Apple platforms only: the
    /// attempt fails while only such a network is up, the events stay
    /// queued and are retried with backoff. Elsewhere it has no effect.
    public var allowsExpensiveNetworkAccess: Bool
    /// False: no uploads while the user has turned on Low Data Mode. Apple
    /// platforms only, as ``allowsExpensiveNetworkAccess``.
    public var allowsConstrainedNetworkAccess: Bool

    /// Options for every request; the defaults send Spool's headers only,
    /// gzip as the format prefers, on any network.
    public init(
        headers: [String: String] = [:], headerProvider: (@Sendable () async throws -> [String: String])? = nil,
        compression: UploadCompression = .automatic, allowsExpensiveNetworkAccess: Bool = true,
        allowsConstrainedNetworkAccess: Bool = true
    ) {
        self.headers = headers
        self.headerProvider = headerProvider
        self.compression = compression
        self.allowsExpensiveNetworkAccess = allowsExpensiveNetworkAccess
        self.allowsConstrainedNetworkAccess = allowsConstrainedNetworkAccess
    }

    /// `Spool/<version> (<OS> <version>)`, sent unless ``headers`` set
    /// `User-Agent`. Add your app in front of it if you like:
    /// `"MyApp/2.1 " + UploadRequestOptions.defaultUserAgent`.
    public static let defaultUserAgent =
        "Spool/\(SpoolVersion.current) (\(SystemPlatform.operatingSystemName) \(SystemPlatform.operatingSystemVersion))"
}

/// Whether request bodies are gzipped (`Content-Encoding: gzip`).
public enum UploadCompression: Sendable, Hashable {
    /// As the format prefers: gzip for Spool's and Segment's formats, none
    /// for the Kafka REST proxy's (Confluent's proxy cannot read gzipped
    /// requests).
    case automatic
    /// Always gzip. A collector that answers 415 without listing `gzip` in
    /// `Accept-Encoding` gets identity bodies from then on.
    case gzip
    /// Never compress.
    case identity
}
