import Foundation

/// JSON records for a Kafka REST proxy, API v2: Confluent REST Proxy and
/// Redpanda's HTTP proxy (`POST <proxy>/topics/<topic>`). Each event becomes
/// one record on the topic. Made by ``BatchFormat/kafkaREST``.
///
/// ```json
/// {"records":[{"key":"u-42","value":{"id":"0190f3a2-…","type":"track","name":"purchase",
///   "timestamp":"2026-11-29T10:15:30.123Z","age":879,"sentAt":"2026-11-29T10:15:31.002Z",
///   "session":"0190f3a1-…","parameters":{"amount":9.99},"anonymousId":"4f6e…","userId":"u-42"}}, …]}
/// ```
///
/// The record `key` is chosen by ``Key`` (``BatchFormat/kafkaREST(key:)``):
/// by default the user id the event was recorded for, else its anonymous id,
/// so one user's events land on one partition, in order, across sessions; or
/// the session id. The `value` is the event as ``SpoolBatchFormat`` writes
/// it, with the request's `sentAt`: the request's envelope does not reach the
/// topic, so each record carries what corrects the device's clock. A consumer
/// puts the event on the proxy's clock as the record's Kafka timestamp (set
/// when the proxy produced it) less `age` (see <doc:Uploading>). The loss the
/// request reports is in its `X-Spool-Loss` header, which the proxy does not
/// pass on: a gateway in front of it reads it. Sent as
/// `application/vnd.kafka.json.v2+json` asking for
/// `application/vnd.kafka.v2+json`, and **not gzipped** by default:
/// Confluent's proxy cannot read gzipped request bodies (it answers with a
/// JSON parse error), and Redpanda's does not document them.
///
/// Answers:
/// - A 200 carries one `offsets` entry per record, in order. A record with no
///   `error_code` (or 0) is on the log. A retriable code — Confluent's
///   documented `2` and its implementation's `50003`, or a retriable Kafka
///   protocol code from Redpanda (leader moving, timeouts, not enough
///   replicas…) — keeps that record and every one after it queued for a
///   retry; any other code (`1`, `50002`, a record too large…) dead-letters
///   that record. A 2xx without `offsets` takes the whole batch.
/// - 404 (`40401` topic not found, `40402` partition not found): a refusal
///   of the request — the events are kept until the topic exists, and
///   uploading is held back with that reason.
/// - 400, 413 and 422 (a record the proxy cannot read): split to isolate it;
///   `42201`, `42202` and `42205` (schema errors): rejected, so split down to
///   the record the proxy refuses alone.
/// - 408, 425, 429 and 5xx: retried, honouring `Retry-After`.
/// - Other 4xx (401, 403, 406, 415): a refusal of the request; the events
///   are kept.
public struct KafkaRESTBatchFormat: BatchFormat {
    /// What each record is keyed by: Kafka keeps the order of one key's
    /// records (they share a partition).
    public enum Key: Sendable, Hashable {
        /// The user id the event was recorded for, else its anonymous id
        /// (`null` for an event stored without an identity).
        case user
        /// The session id (`null` outside a session).
        case session
    }

    /// What each record is keyed by.
    let key: Key

    /// The format ``BatchFormat/kafkaREST`` and
    /// ``BatchFormat/kafkaREST(key:)`` make.
    init(key: Key = .user) {
        self.key = key
    }

    @_spi(FormatAuthoring) public var contentType: String { "application/vnd.kafka.json.v2+json" }
    @_spi(FormatAuthoring) public var headers: [String: String] { ["Accept": "application/vnd.kafka.v2+json"] }
    @_spi(FormatAuthoring) public var compressesByDefault: Bool { false }

    @_spi(FormatAuthoring) public func appendPrologue(sentAt: Date, to body: inout [UInt8]) {
        body.append(literal: #"{"records":["#)
    }

    @_spi(FormatAuthoring) public func append(_ event: BatchEvent, to body: inout [UInt8]) {
        body.append(literal: #"{"key":"#)
        switch key {
        case .user:
            if event.userId != nil { event.appendUserID(to: &body) } else { event.appendAnonymousID(to: &body) }
        case .session:
            event.appendSession(to: &body)
        }
        body.append(literal: #","value":"#)
        SpoolBatchFormat.appendObject(event, sentAt: true, to: &body)
        body.append(UInt8(ascii: "}"))
    }

    @_spi(FormatAuthoring) public func appendEpilogue(sentAt: Date, to body: inout [UInt8]) {
        body.append(literal: "]}")
    }

    @_spi(FormatAuthoring) public func verdict(for response: UploadResponse, eventCount: Int) -> UploadVerdict {
        let status = response.status
        let envelope = Self.object(response.body)
        if (200..<300).contains(status) {
            guard case .array(let offsets)? = envelope?["offsets"] else { return .accepted }
            let results = offsets.map(Self.result)
            if results.count == eventCount && results.allSatisfy({ $0 == .accepted }) { return .accepted }
            return .perEvent(results)
        }
        let code = envelope.flatMap { Self.int($0["error_code"]) }
        var reason = "HTTP \(status)"
        if let code { reason += " error_code \(code)" }
        if case .string(let message)? = envelope?["message"] {
            reason += ": " + message
        } else if let message = response.message() {
            reason += ": " + message
        }
        switch (status, code) {
        case (404, _), (_, 40401), (_, 40402):
            // An unknown topic or partition is about the request: the events
            // wait for it (it may be being created), and uploading is held
            // back with a reason that says so.
            return .refusedRequest(reason: reason, retryAfter: response.retryAfter)
        case (_, 42201), (_, 42202), (_, 42205):
            return .rejected(reason: reason)
        case (400, _), (413, _), (422, _):
            return .split(reason: reason)
        case (408, _), (425, _), (429, _), (500..., _):
            return .retry(reason: reason, retryAfter: response.retryAfter)
        case (300..<400, _), (..<200, _):
            return .retry(reason: reason, retryAfter: nil)
        default:
            return .refusedRequest(reason: reason, retryAfter: response.retryAfter)
        }
    }

    // MARK: - Per-record results

    /// Confluent's documented per-record retriable code (2) and its
    /// implementation's (50003), the proxies' "try again" envelope codes, and
    /// the Kafka protocol codes marked retriable that a produce can return
    /// (Redpanda reports those as they are): corrupt message, unknown topic
    /// or partition, leader not available, not leader, request timed out,
    /// replica not available, network exception, coordinator codes, not
    /// enough replicas (before and after append), storage error, fenced and
    /// unknown leader epoch, throttling quota exceeded.
    static let retriableCodes: Set<Int> = [
        2, 3, 5, 6, 7, 9, 13, 14, 15, 16, 19, 20, 56, 74, 75, 89, 50003, 50301, 50302,
    ]

    static func result(_ offset: EventValue) -> UploadVerdict.EventResult {
        guard case .object(let entry) = offset, let code = int(entry["error_code"]), code != 0 else {
            return .accepted
        }
        var reason = "Kafka error_code \(code)"
        if case .string(let message)? = entry["error"] { reason += ": " + message }
        return retriableCodes.contains(code) ? .retry(reason: reason) : .rejected(reason: reason)
    }

    private static func int(_ value: EventValue?) -> Int? {
        switch value {
        case .int(let int)?: return int
        case .double(let double)?:
            // Whole and in range, or not a code.
            guard double.rounded() == double, abs(double) < 1e15 else { return nil }
            return Int(double)
        default: return nil
        }
    }

    /// The answer's top-level object, if it is JSON.
    private static func object(_ body: Data) -> [String: EventValue]? {
        guard !body.isEmpty else { return nil }
        // try?: an answer that is not JSON carries no per-record results;
        // the status alone decides.
        return try? JSONReader.parseObject(String(decoding: body, as: UTF8.self))
    }
}

extension BatchFormat where Self == KafkaRESTBatchFormat {
    /// JSON records for a Kafka REST proxy (API v2), keyed by user: see
    /// ``KafkaRESTBatchFormat``. The topic is in the collector URL
    /// (`<proxy>/topics/<topic>`).
    public static var kafkaREST: KafkaRESTBatchFormat { KafkaRESTBatchFormat() }

    /// JSON records for a Kafka REST proxy, keyed by `key`: see
    /// ``KafkaRESTBatchFormat``.
    public static func kafkaREST(key: KafkaRESTBatchFormat.Key) -> KafkaRESTBatchFormat {
        KafkaRESTBatchFormat(key: key)
    }
}
