import Foundation

/// Segment's HTTP Tracking API batch (`POST https://api.segment.io/v1/batch`),
/// also accepted by RudderStack (`<data plane>/v1/batch`) and Jitsu: each
/// event becomes the call of its ``EventType``. Made by
/// ``BatchFormat/segment(writeKey:anonymousId:userId:context:)``.
///
/// ```json
/// {"batch":[{"type":"track","event":"purchase","properties":{"amount":9.99},
///   "messageId":"0190f3a2-…","timestamp":"2026-11-29T10:15:30.123Z",
///   "anonymousId":"…","userId":"…",
///   "context":{"app":{…},"library":{"name":"spool","version":"…"},"sessionId":"0190f3a1-…"}}, …],
///  "sentAt":"2026-11-29T10:15:31.002Z","writeKey":"…"}
/// ```
///
/// - A `track` carries `event` (the name) and `properties` (the stored
///   parameters as they are); a `screen` carries `name` and `properties`;
///   an `identify` carries `traits`; a `group` carries `groupId` and
///   `traits`; an `alias` carries `previousId`. `messageId` is the event id
///   (Segment deduplicates on it), `timestamp` when it was recorded and
///   `sentAt` when the request was built, both on the device's clock:
///   Segment corrects the device's clock with the two, as receivedAt −
///   (`sentAt` − `timestamp`) (see <doc:Uploading>). The loss the request
///   reports is in its `X-Spool-Loss` header.
/// - `anonymousId`, `userId` and `context` are the ones the event was
///   recorded with (``EventEngine/identify(userId:traits:)``,
///   ``EventEngine/setContext(_:)``), whoever is signed in at upload time.
///   This configuration's `anonymousId`, `userId` and `context` stand in
///   only for events stored without an identity or a context.
/// - The Spool session id goes in `context.sessionId`, where RudderStack's
///   own SDKs put theirs, so `properties` stay exactly what the app recorded.
///   Spool also fills `context.library` unless the context has one.
/// - Authentication: HTTP Basic with the write key as the user name and an
///   empty password, and `writeKey` in the body too (Segment documents both;
///   its own libraries send both; RudderStack reads the header, Jitsu
///   either).
/// - Limits: at most 500 KB per request before compression, 32 KB per event
///   (a larger event is never sent: it goes to the dead letters) and 2,500
///   events per request (Segment answers 200 to more, and drops them).
///
/// Answers: any 2xx takes the batch (Segment answers 200 even for events it
/// later drops; check its debugger); 400 (invalid JSON, too large) and 413
/// (RudderStack: too large) split the batch to isolate the event; 429 waits
/// for `Retry-After`; 5xx and 408 retry; 401, 403, 404 (a wrong or disabled
/// write key, a disabled source) and other 4xx are refusals of the request:
/// the events are kept and uploading is held back until the collector takes
/// them (Spool's standard verdict).
public struct SegmentBatchFormat: BatchFormat {
    /// Segment's limit per request: 500 KB.
    @_spi(FormatAuthoring) public static let maximumRequestBytes = 500_000
    /// Segment's limit per event: 32 KB.
    @_spi(FormatAuthoring) public static let maximumMessageBytes = 32_000
    /// Segment's limit per batch: 2,500 events.
    @_spi(FormatAuthoring) public static let maximumBatchEvents = 2_500

    /// The source's write key: the user name of the Basic `Authorization`
    /// header, and `writeKey` in the body.
    let writeKey: String
    /// `anonymousId` for events stored without an identity.
    let anonymousId: String
    /// `userId` for events stored without an identity, when set.
    let userId: String?

    /// `"anonymousId":…[,"userId":…]`, for events stored without an identity.
    private let identity: [UInt8]
    /// `"context":{<members>`, the closing brace written per event, for
    /// events stored without a context.
    private let contextOpening: [UInt8]
    private let contextHasMembers: Bool
    /// `"library":{…}`.
    private let library: [UInt8]
    /// `,"writeKey":…}`.
    private let closing: [UInt8]
    private let authorization: String

    /// The format ``BatchFormat/segment(writeKey:anonymousId:userId:context:)``
    /// makes; the parameters are documented there.
    init(
        writeKey: String, anonymousId: String = "", userId: String? = nil, context: [String: EventValue] = [:]
    ) throws(SpoolError) {
        self.writeKey = writeKey
        self.anonymousId = anonymousId
        self.userId = userId
        var identity: [UInt8] = Array(#""anonymousId":"#.utf8)
        EventEncoder.appendJSONString(anonymousId, to: &identity)
        if let userId {
            identity.append(literal: #","userId":"#)
            EventEncoder.appendJSONString(userId, to: &identity)
        }
        self.identity = identity

        var context = context
        context["sessionId"] = nil
        let library: [String: EventValue] = ["name": "spool", "version": .string(SpoolVersion.current)]
        self.library = Array(#""library":"#.utf8) + Array(try EventEncoder.encode(library).utf8)
        if context["library"] == nil { context["library"] = .object(library) }
        var encoded = Array(try EventEncoder.encode(context).utf8)
        encoded.removeLast()  // the closing brace, written per event after sessionId
        contextHasMembers = encoded.count > 1
        contextOpening = Array(#","context":"#.utf8) + encoded

        var closing: [UInt8] = Array(#","writeKey":"#.utf8)
        EventEncoder.appendJSONString(writeKey, to: &closing)
        closing.append(UInt8(ascii: "}"))
        self.closing = closing
        authorization = "Basic " + Data((writeKey + ":").utf8).base64EncodedString()
    }

    @_spi(FormatAuthoring) public var headers: [String: String] { ["Authorization": authorization] }
    @_spi(FormatAuthoring) public var maximumBodyBytes: Int { Self.maximumRequestBytes }
    @_spi(FormatAuthoring) public var maximumEventsPerRequest: Int? { Self.maximumBatchEvents }
    @_spi(FormatAuthoring) public var maximumEventBytes: Int? { Self.maximumMessageBytes }

    @_spi(FormatAuthoring) public func appendPrologue(sentAt: Date, to body: inout [UInt8]) {
        body.append(literal: #"{"batch":["#)
    }

    @_spi(FormatAuthoring) public func append(_ event: BatchEvent, to body: inout [UInt8]) {
        body.append(literal: #"{"type":"#)
        event.appendType(to: &body)
        switch event.type {
        case .track, .screen:
            // A track names its event, a screen the screen.
            body.append(literal: event.type == .track ? #","event":"# : #","name":"#)
            event.appendName(to: &body)
            body.append(literal: #","properties":"#)
            event.appendParameters(to: &body)
        case .identify:
            body.append(literal: #","traits":"#)
            event.appendParameters(to: &body)
        case .group:
            body.append(literal: #","groupId":"#)
            event.appendTarget(to: &body)
            body.append(literal: #","traits":"#)
            event.appendParameters(to: &body)
        case .alias:
            body.append(literal: #","previousId":"#)
            if event.target != nil { event.appendTarget(to: &body) } else { event.appendAnonymousID(to: &body) }
        }
        body.append(literal: #","messageId":"#)
        event.appendID(to: &body)
        body.append(literal: #","timestamp":"#)
        event.appendTimestamp(to: &body)
        body.append(UInt8(ascii: ","))
        if !event.appendIdentityMembers(to: &body) { body.append(contentsOf: identity) }
        var hasMembers: Bool
        if event.hasContext {
            body.append(literal: #","context":{"#)
            hasMembers = event.appendContextMembers(to: &body)
            if !event.contextHasMember("library") {
                if hasMembers { body.append(UInt8(ascii: ",")) }
                body.append(contentsOf: library)
                hasMembers = true
            }
        } else {
            body.append(contentsOf: contextOpening)
            hasMembers = contextHasMembers
        }
        if event.hasSession {
            if hasMembers { body.append(UInt8(ascii: ",")) }
            body.append(literal: #""sessionId":"#)
            event.appendSession(to: &body)
        }
        body.append(literal: "}}")
    }

    @_spi(FormatAuthoring) public func appendEpilogue(sentAt: Date, to body: inout [UInt8]) {
        body.append(literal: #"],"sentAt":"#)
        BatchEvent.appendTimestamp(sentAt, to: &body)
        body.append(contentsOf: closing)
    }
}

extension BatchFormat where Self == SegmentBatchFormat {
    /// Segment's HTTP Tracking API batch (also RudderStack and Jitsu): see
    /// ``SegmentBatchFormat``.
    ///
    /// - Parameters:
    ///   - writeKey: the source's write key.
    ///   - anonymousId: the `anonymousId` of events stored without an
    ///     identity (Segment requires it or a `userId`). Events recorded
    ///     by Spool carry the engine's own (``SpoolIdentity``).
    ///   - userId: the `userId` of events stored without an identity.
    ///   - context: Segment's `context` object for events stored without a
    ///     context, encoded once here. `sessionId` is Spool's and is
    ///     replaced.
    /// - Throws: ``SpoolError/invalidEvent(_:)`` when `context` holds a value Spool
    ///   cannot encode (a non-finite number, a date out of range, nesting
    ///   too deep).
    public static func segment(
        writeKey: String, anonymousId: String = "", userId: String? = nil, context: [String: EventValue] = [:]
    ) throws(SpoolError) -> SegmentBatchFormat {
        try SegmentBatchFormat(writeKey: writeKey, anonymousId: anonymousId, userId: userId, context: context)
    }
}
