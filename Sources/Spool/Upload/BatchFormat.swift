import Foundation
import SpoolStorage

/// How a batch of events is written for one kind of collector, and what that
/// collector's answers mean.
///
/// Spool ships three: ``SpoolBatchFormat`` (the default), ``SegmentBatchFormat``
/// (Segment's HTTP Tracking API, also RudderStack and Jitsu) and
/// ``KafkaRESTBatchFormat`` (Confluent REST Proxy v2, Redpanda's HTTP proxy).
/// Choose one with ``DefaultEventDispatcher``'s `format:`.
///
/// A body is written straight from the stored bytes: Spool calls
/// `appendPrologue(sentAt:to:)` once, `append(_:to:)` for each event (with
/// a comma between events), then `appendEpilogue(sentAt:to:)`. The event's
/// parameters are spliced in as stored, never decoded and encoded again.
/// `sentAt` is the device's clock when the body is built; `BatchEvent`
/// gives each event's age then, on the device's monotonic clock, for a
/// collector to correct the device's clock (see <doc:Uploading>). The
/// loss the request reports goes in its `X-Spool-Loss` header, whatever
/// the format writes.
///
/// Choosing a format needs nothing more. Writing one needs the format
/// authors' interface, `@_spi(FormatAuthoring) import Spool`: the
/// requirements below, `BatchEvent`, `UploadVerdict` and `UploadResponse`
/// are part of it.
///
/// ## Implementation requirements
///
/// - The three `append` methods only append to `body`; Spool takes an event
///   back out when it does not fit, so they must not look at or change what
///   is already there. They run on Spool's database queue: no I/O, no locks,
///   no waiting.
/// - The `BatchEvent` passed to `append(_:to:)` is valid only during the
///   call: do not keep it.
/// - `verdict(for:eventCount:)` is a pure function of the answer. Report
///   `UploadVerdict.accepted` only for events the collector took: Spool
///   deletes them. Spool itself handles what no format may change: a 1xx or
///   3xx keeps the events, a non-2xx is never delivery, and a 415 to a
///   gzipped body turns compression off.
/// - Every requirement except the three `append` methods has a default:
///   JSON, Spool's limits, gzip, and `UploadVerdict.standard(for:)`.
public protocol BatchFormat: Sendable {
    /// The `Content-Type` of the body. Default `application/json`.
    @_spi(FormatAuthoring) var contentType: String { get }
    /// Headers every request carries (authentication, `Accept`). Headers the
    /// dispatcher is configured with replace these. Default none.
    @_spi(FormatAuthoring) var headers: [String: String] { get }
    /// Whether bodies are gzipped when the dispatcher's
    /// ``UploadRequestOptions/compression`` is `.automatic`. Default true.
    @_spi(FormatAuthoring) var compressesByDefault: Bool { get }
    /// The largest body, in bytes **before** compression (what the collector
    /// parses); a batch that would pass it is cut short. Default 3.5 MB.
    @_spi(FormatAuthoring) var maximumBodyBytes: Int { get }
    /// The most events one request carries, when the collector has a limit
    /// (the dispatcher's `batchSize` applies too). Default none.
    @_spi(FormatAuthoring) var maximumEventsPerRequest: Int? { get }
    /// The most bytes one event may take in the body (what ``append(_:to:)``
    /// writes), when the collector has a limit. A larger event is never sent:
    /// it goes to the dead letters with no status. Default none.
    @_spi(FormatAuthoring) var maximumEventBytes: Int? { get }

    /// Appends what comes before the first event.
    @_spi(FormatAuthoring) func appendPrologue(sentAt: Date, to body: inout [UInt8])
    /// Appends one event.
    @_spi(FormatAuthoring) func append(_ event: BatchEvent, to body: inout [UInt8])
    /// Appends what comes after the last event.
    @_spi(FormatAuthoring) func appendEpilogue(sentAt: Date, to body: inout [UInt8])

    /// What the collector's answer to a request carrying `eventCount` events
    /// means for them.
    @_spi(FormatAuthoring) func verdict(for response: UploadResponse, eventCount: Int) -> UploadVerdict
}

extension BatchFormat {
    @_spi(FormatAuthoring) public var contentType: String { "application/json" }
    @_spi(FormatAuthoring) public var headers: [String: String] { [:] }
    @_spi(FormatAuthoring) public var compressesByDefault: Bool { true }
    @_spi(FormatAuthoring) public var maximumBodyBytes: Int { SpoolBatchFormat.maximumBodyBytes }
    @_spi(FormatAuthoring) public var maximumEventsPerRequest: Int? { nil }
    @_spi(FormatAuthoring) public var maximumEventBytes: Int? { nil }

    @_spi(FormatAuthoring) public func verdict(for response: UploadResponse, eventCount: Int) -> UploadVerdict {
        .standard(for: response)
    }
}

// MARK: - One event's bytes

/// One stored event while a batch body is written: its columns as SQLite
/// holds them, appended to the body without an intermediate `String`.
///
/// Valid only inside the ``BatchFormat/append(_:to:)`` call that receives it.
@_spi(FormatAuthoring) public struct BatchEvent {
    let row: EventRowView
    /// When and on which clocks the body is built.
    let clock: BatchClock

    init(_ row: EventRowView, clock: BatchClock) {
        self.row = row
        self.clock = clock
    }

    /// When it was recorded, in seconds since 1970.
    @_spi(FormatAuthoring) public var recordedAt: TimeInterval { row.recordedAt }

    /// How long before the body was built it was recorded, in milliseconds.
    ///
    /// While the launch that recorded it builds the body, measured on the
    /// device's monotonic clock, which counts sleep and ignores changes of
    /// the wall clock (``ageIsMonotonic``). For an event an earlier launch
    /// (or another process) recorded, the wall clock's difference between
    /// the body's `sentAt` and the event's timestamp: off by whatever the
    /// device's clock was changed by in between.
    @_spi(FormatAuthoring) public var ageMilliseconds: Int64 { age.milliseconds }

    /// True when ``ageMilliseconds`` was measured on the monotonic clock of
    /// the launch that recorded the event.
    @_spi(FormatAuthoring) public var ageIsMonotonic: Bool { age.monotonic }

    private var age: (milliseconds: Int64, monotonic: Bool) {
        if let now = clock.launch, let recorded = row.launch, recorded.id == now.id {
            return (now.now - recorded.milliseconds, true)
        }
        return (clock.sentAtMilliseconds - EventLog.Launch.milliseconds(row.recordedAt), false)
    }

    /// Appends `"age":<milliseconds>`, and `,"ageClock":"wall"` when the age
    /// is the wall clock's: the members Spool's format and the Kafka REST
    /// format's record values carry.
    func appendAgeMembers(to body: inout [UInt8]) {
        let age = self.age
        body.append(literal: #""age":"#)
        body.append(integer: age.milliseconds)
        if !age.monotonic { body.append(literal: #","ageClock":"wall""#) }
    }
    /// True when it was recorded inside a session.
    var hasSession: Bool { row.session != nil }

    /// The event id (a UUIDv7, stable across retries: deduplicate on it).
    @_spi(FormatAuthoring) public var id: String { String(decoding: row.id, as: UTF8.self) }
    /// The event name.
    @_spi(FormatAuthoring) public var name: String { String(decoding: row.name, as: UTF8.self) }
    /// The session id, if recorded in a session.
    @_spi(FormatAuthoring) public var session: String? { row.session.map { String(decoding: $0, as: UTF8.self) } }

    /// Appends the id as a JSON string.
    func appendID(to body: inout [UInt8]) {
        EventEncoder.appendJSONString(row.id, to: &body)
    }

    /// Appends the name as a JSON string.
    func appendName(to body: inout [UInt8]) {
        EventEncoder.appendJSONString(row.name, to: &body)
    }

    /// Appends the session id as a JSON string, or `null` outside a session.
    func appendSession(to body: inout [UInt8]) {
        if let session = row.session {
            EventEncoder.appendJSONString(session, to: &body)
        } else {
            body.append(literal: "null")
        }
    }

    /// Appends when it was recorded as a JSON string: ISO 8601 in UTC with
    /// milliseconds (`"2026-11-29T10:15:30.123Z"`).
    @_spi(FormatAuthoring) public func appendTimestamp(to body: inout [UInt8]) {
        Self.appendTimestamp(Date(timeIntervalSince1970: row.recordedAt), to: &body)
    }

    /// Appends the parameters: a JSON object, exactly as stored (keys
    /// sorted, dates as ISO 8601 strings).
    @_spi(FormatAuthoring) public func appendParameters(to body: inout [UInt8]) {
        body.append(contentsOf: row.parameters)
    }

    /// The message type.
    @_spi(FormatAuthoring) public var type: EventType {
        EventType(rawValue: String(decoding: row.type, as: UTF8.self)) ?? .track
    }
    /// The anonymous id it was recorded for (nil for an event stored before
    /// identities were kept).
    @_spi(FormatAuthoring) public var anonymousId: String? {
        row.anonymousID.map { String(decoding: $0, as: UTF8.self) }
    }
    /// The user id it was recorded for, if any.
    @_spi(FormatAuthoring) public var userId: String? { row.userID.map { String(decoding: $0, as: UTF8.self) } }
    /// A `group`'s id, or an `alias`'s previous user id (nil: the previous
    /// id is the anonymous id).
    @_spi(FormatAuthoring) public var target: String? { row.target.map { String(decoding: $0, as: UTF8.self) } }
    /// True when it was recorded with an identity.
    var hasIdentity: Bool { row.anonymousID != nil }
    /// True when a context was in force when it was recorded.
    @_spi(FormatAuthoring) public var hasContext: Bool { row.context != nil }

    /// Appends the message type as a JSON string (`"track"`).
    func appendType(to body: inout [UInt8]) {
        EventEncoder.appendJSONString(row.type, to: &body)
    }

    /// Appends the anonymous id as a JSON string, or `null` without an
    /// identity.
    func appendAnonymousID(to body: inout [UInt8]) {
        Self.appendStringOrNull(row.anonymousID, to: &body)
    }

    /// Appends the user id as a JSON string, or `null` without one.
    func appendUserID(to body: inout [UInt8]) {
        Self.appendStringOrNull(row.userID, to: &body)
    }

    /// Appends the target (a group's id, an alias's previous id) as a JSON
    /// string, or `null` without one.
    func appendTarget(to body: inout [UInt8]) {
        Self.appendStringOrNull(row.target, to: &body)
    }

    /// Appends the identity's traits: a JSON object, as stored (`{}` without
    /// an identity).
    @_spi(FormatAuthoring) public func appendTraits(to body: inout [UInt8]) {
        if let traits = row.traits { body.append(contentsOf: traits) } else { body.append(literal: "{}") }
    }

    /// Appends the context: a JSON object, as stored (`{}` without one).
    @_spi(FormatAuthoring) public func appendContext(to body: inout [UInt8]) {
        if let context = row.context { body.append(contentsOf: context) } else { body.append(literal: "{}") }
    }

    /// Appends the members of the context object, without its braces
    /// (nothing without a context or for an empty one), to splice them into
    /// an object of the format's own.
    ///
    /// - Returns: whether it appended any member.
    @discardableResult
    @_spi(FormatAuthoring) public func appendContextMembers(to body: inout [UInt8]) -> Bool {
        guard let context = row.context, context.count > 2 else { return false }
        body.append(contentsOf: context[1..<(context.count - 1)])
        return true
    }

    /// Appends `"anonymousId":…` and, with a user, `,"userId":…`: the
    /// identity as object members, as Segment's and Spool's formats write it.
    ///
    /// - Returns: false, having appended nothing, for an event stored
    ///   without an identity.
    @discardableResult
    func appendIdentityMembers(to body: inout [UInt8]) -> Bool {
        guard hasIdentity else { return false }
        body.append(literal: #""anonymousId":"#)
        appendAnonymousID(to: &body)
        if row.userID != nil {
            body.append(literal: #","userId":"#)
            appendUserID(to: &body)
        }
        return true
    }

    /// Whether the context has a top-level member `name`.
    func contextHasMember(_ name: String) -> Bool {
        guard let context = row.context else { return false }
        // Keys are written sorted and escaped by Spool's encoder; a nested
        // object's key of the same name only makes this answer true.
        let key = Array(("\"" + name + "\":").utf8)
        guard context.count >= key.count else { return false }
        return (0...(context.count - key.count)).contains { start in
            key.indices.allSatisfy { context[start + $0] == key[$0] }
        }
    }

    private static func appendStringOrNull(_ bytes: UnsafeRawBufferPointer?, to body: inout [UInt8]) {
        if let bytes { EventEncoder.appendJSONString(bytes, to: &body) } else { body.append(literal: "null") }
    }

    /// Appends `string` as a JSON string literal, escaped per RFC 8259.
    @_spi(FormatAuthoring) public static func appendJSONString(_ string: String, to body: inout [UInt8]) {
        EventEncoder.appendJSONString(string, to: &body)
    }

    /// Appends `date` as a JSON string: ISO 8601 in UTC with milliseconds.
    @_spi(FormatAuthoring) public static func appendTimestamp(_ date: Date, to body: inout [UInt8]) {
        body.append(UInt8(ascii: "\""))
        ISO8601Milliseconds.append(date, to: &body)
        body.append(UInt8(ascii: "\""))
    }
}

/// Its bytes belong to SQLite and are valid only during one call.
@available(*, unavailable)
extension BatchEvent: Sendable {}
