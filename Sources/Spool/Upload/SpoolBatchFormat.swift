import Foundation
import SpoolStorage

/// Spool's own body, the default (``BatchFormat/spool``): every column of
/// every event, for a collector you run yourself.
///
/// ```json
/// {"sentAt":"2026-11-29T10:15:31.002Z","spool":{"lost":{"queue_count":0,…,"wal_lost":0}},"events":[
///   {"id":"0190f3a2-…","type":"track","name":"purchase","timestamp":"2026-11-29T10:15:30.123Z",
///    "age":879,"session":"0190f3a1-…","parameters":{"amount":9.99},
///    "anonymousId":"4f6e…","userId":"u-42","context":{"app":{…}}}, …]}
/// ```
///
/// `id` is the stable UUIDv7 to deduplicate on (an event can arrive twice
/// after a crash or a lost response); `type` is the message type
/// (``EventType``); `timestamp` is when it was recorded, on the device's
/// clock; `session` is null for events recorded outside a session.
/// `anonymousId` and `userId` are the identity the event was recorded for,
/// `context` the context in force (``EventContext``), and `target` a group's
/// id or an alias's previous id; each is left out when the event has none.
///
/// The device's clock: `sentAt` is the device's clock when the request was
/// built, and `age` how many milliseconds before that the event was
/// recorded, on the device's monotonic clock (with `"ageClock":"wall"`, for
/// an event an earlier launch recorded: the wall clock's `sentAt` −
/// `timestamp`). A collector puts the event on its own clock as the time it
/// received the request less `age`.
///
/// `spool.lost` counts the events the device lost since the last request a
/// collector accepted, by cause (`queue_count`, `queue_bytes`, `queue_age`,
/// `free_space`, `dead_lettered`, `salvaged`, `wal_lost`); a collector adds
/// up those of the requests it accepts. Both are explained in
/// <doc:Uploading>.
///
/// Sent as `application/json`, gzipped unless the dispatcher says otherwise;
/// answers are read with Spool's standard verdict (the table in
/// <doc:Uploading>).
public struct SpoolBatchFormat: BatchFormat {
    /// No body is larger, before compression: the collector's documented
    /// limit, and what the collector parses.
    @_spi(FormatAuthoring) public static let maximumBodyBytes = 3_500_000

    /// The prologue of a request that reports no loss.
    @_spi(FormatAuthoring) public func appendPrologue(sentAt: Date, to body: inout [UInt8]) {
        appendPrologue(sentAt: sentAt, loss: LossCounts(), to: &body)
    }

    @_spi(FormatAuthoring) public func append(_ event: BatchEvent, to body: inout [UInt8]) {
        Self.appendObject(event, to: &body)
    }

    @_spi(FormatAuthoring) public func appendEpilogue(sentAt: Date, to body: inout [UInt8]) {
        body.append(literal: "]}")
    }

    /// `{"id":…,"type":…,"name":…,"timestamp":…,"age":…,"session":…,"parameters":{…},…}`:
    /// the event as Spool's format and the Kafka REST format's record values
    /// carry it; with `sentAt`, the body's `sentAt` after its age (a Kafka
    /// record's value, which leaves the request's envelope behind).
    @inline(__always)
    static func appendObject(_ event: BatchEvent, sentAt: Bool = false, to body: inout [UInt8]) {
        body.append(literal: #"{"id":"#)
        event.appendID(to: &body)
        body.append(literal: #","type":"#)
        event.appendType(to: &body)
        body.append(literal: #","name":"#)
        event.appendName(to: &body)
        body.append(literal: #","timestamp":"#)
        event.appendTimestamp(to: &body)
        body.append(UInt8(ascii: ","))
        event.appendAgeMembers(to: &body)
        if sentAt {
            body.append(literal: #","sentAt":"#)
            event.clock.appendSentAt(to: &body)
        }
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

extension SpoolBatchFormat: LossReportingFormat {
    /// `{"sentAt":…,"spool":{"lost":{<cause>:<events>,…}},"events":[`.
    func appendPrologue(sentAt: Date, loss: LossCounts, to body: inout [UInt8]) {
        body.append(literal: #"{"sentAt":"#)
        BatchEvent.appendTimestamp(sentAt, to: &body)
        body.append(literal: #","spool":{"lost":{"#)
        for (index, (cause, events)) in loss.all.enumerated() {
            if index > 0 { body.append(UInt8(ascii: ",")) }
            BatchEvent.appendJSONString(cause.rawValue, to: &body)
            body.append(UInt8(ascii: ":"))
            body.append(integer: Int64(events))
        }
        body.append(literal: #"}},"events":["#)
    }
}

extension BatchFormat where Self == SpoolBatchFormat {
    /// Spool's own body: see ``SpoolBatchFormat``.
    public static var spool: SpoolBatchFormat { SpoolBatchFormat() }
}
