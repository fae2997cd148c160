import Foundation

/// One request for a dispatcher to send: where to, and the exact JSON body.
public struct EventForDispatch: Sendable, Hashable {
    /// The collector endpoint.
    public let url: URL
    /// The JSON body. Send it as given: a dispatcher must not modify it.
    public let body: Data
    /// How many events the body carries (a batch built by Spool), for logs.
    public let eventCount: Int

    /// A request to POST `body` to `url`, carrying `eventCount` events.
    public init(url: URL, body: Data, eventCount: Int = 1) {
        self.url = url
        self.body = body
        self.eventCount = eventCount
    }
}
