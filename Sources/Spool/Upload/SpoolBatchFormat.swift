import Foundation

/// Spool's own body, the default (``BatchFormat/spool``): every column of
/// every event, for a collector you run yourself.
///
/// ```json
/// {"sentAt":"2026-11-29T10:15:31.002Z","events":[
///   {"id":"0190f3a2-…","type":"track","name":"purchase","timestamp":"2026-11-29T10:15:30.123Z",
///    "session":"0190f3a1-…","parameters":{"amount":9.99},
///    "anonymousId":"4f6e…","userId":"u-42","context":{"app":{…}}}, …]}
/// ```
///
/// `id` is the stable UUIDv7 to deduplicate on (an event can arrive twice
/// after a crash or a lost response); `type` is the message type
/// (``EventType``); `timestamp` is when it was recorded; `session` is null
/// for events recorded outside a session; `sentAt` is when the request was
/// built, to correct for the device's clock. `anonymousId` and `userId` are
/// the identity the event was recorded for, `context` the context in force
/// (``EventContext``), and `target` a group's id or an alias's previous id;
/// each is left out when the event has none. Sent as
/// `application/json`, gzipped unless the dispatcher says otherwise; answers
/// are read with Spool's standard verdict (the table in <doc:Uploading>).
public struct SpoolBatchFormat: BatchFormat {
    /// No body is larger, before compression: the collector's documented
    /// limit, and what the collector parses.
    @_spi(FormatAuthoring) public static let maximumBodyBytes = 3_500_000

    @_spi(FormatAuthoring) public func appendPrologue(sentAt: Date, to body: inout [UInt8]) {
        body.append(literal: #"{"sentAt":"#)
        BatchEvent.appendTimestamp(sentAt, to: &body)
        body.append(literal: #","events":["#)
    }

    @_spi(FormatAuthoring) public func append(_ event: BatchEvent, to body: inout [UInt8]) {
        Self.appendObject(event, to: &body)
    }

    @_spi(FormatAuthoring) public func appendEpilogue(sentAt: Date, to body: inout [UInt8]) {
        body.append(literal: "]}")
    }

    /// `{"id":…,"name":…,"timestamp":…,"session":…,"parameters":{…}}`: the
    /// event as Spool's format and the Kafka REST format's record values
    /// carry it.
    @inline(__always)
    static func appendObject(_ event: BatchEvent, to body: inout [UInt8]) {
        body.append(literal: #"{"id":"#)
        event.appendID(to: &body)
        body.append(literal: #","type":"#)
        event.appendType(to: &body)
        body.append(literal: #","name":"#)
        event.appendName(to: &body)
        body.append(literal: #","timestamp":"#)
        event.appendTimestamp(to: &body)
        body.append(literal: #","session":"#)
        event.appendSession(to: &body)
        body.append(literal: #","parameters":"#)
        event.appendParameters(to: &body)
        if event.hasIdentity {
            body.append(UInt8(ascii: ","))
            event.appendIdentityMembers(to: &body)
        }
        if event.target != nil {
            body.append(literal: #","target":"#)
            event.appendTarget(to: &body)
        }
        if event.hasContext {
            body.append(literal: #","context":"#)
            event.appendContext(to: &body)
        }
        body.append(UInt8(ascii: "}"))
    }
}

extension BatchFormat where Self == SpoolBatchFormat {
    /// Spool's own body: see ``SpoolBatchFormat``.
    public static var spool: SpoolBatchFormat { SpoolBatchFormat() }
}
