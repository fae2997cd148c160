import Foundation

/// The upload request body, built by concatenating stored JSON (no
/// re-encoding of parameters):
///
/// ```json
/// {"sentAt":"2026-11-29T10:15:31.002Z","events":[
///   {"id":"0190f3a2-…","name":"purchase","timestamp":"2026-11-29T10:15:30.123Z",
///    "session":"0190f3a1-…","parameters":{"amount":9.99}}, …]}
/// ```
///
/// `id` is the stable UUIDv7 to deduplicate on (an event can arrive twice
/// after a crash or a lost response); `timestamp` is when it was recorded;
/// `session` is null for events recorded outside a session.
enum UploadBody {
    /// No request body is larger (D6); the collector's documented limit.
    static let maximumBytes = 3_500_000

    /// Builds a body from the longest prefix of `events` that fits in
    /// `maximumBytes` (always at least one event: a single event is at most
    /// ``EventLimits/maximumEncodedBytes`` plus its envelope).
    ///
    /// - Returns: the body and how many events it carries.
    static func build(_ events: ArraySlice<StoredEvent>, sentAt: Date = Date(), maximumBytes: Int = maximumBytes)
        -> (body: Data, count: Int)
    {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(64 + events.reduce(0) { $0 + $1.parametersJSON.utf8.count + 160 })
        bytes.append(contentsOf: #"{"sentAt":""#.utf8)
        ISO8601Milliseconds.append(sentAt, to: &bytes)
        bytes.append(contentsOf: #"","events":["#.utf8)
        var count = 0
        var scratch: [UInt8] = []
        for event in events {
            scratch.removeAll(keepingCapacity: true)
            if count > 0 { scratch.append(UInt8(ascii: ",")) }
            append(event, to: &scratch)
            // 2 bytes for the closing "]}".
            if count > 0 && bytes.count + scratch.count + 2 > maximumBytes { break }
            bytes.append(contentsOf: scratch)
            count += 1
        }
        bytes.append(contentsOf: "]}".utf8)
        return (Data(bytes), count)
    }

    private static func append(_ event: StoredEvent, to bytes: inout [UInt8]) {
        bytes.append(contentsOf: #"{"id":"#.utf8)
        EventEncoder.appendJSONString(event.id, to: &bytes)
        bytes.append(contentsOf: #","name":"#.utf8)
        EventEncoder.appendJSONString(event.name, to: &bytes)
        bytes.append(contentsOf: #","timestamp":""#.utf8)
        ISO8601Milliseconds.append(Date(timeIntervalSince1970: event.recordedAt), to: &bytes)
        bytes.append(contentsOf: #"","session":"#.utf8)
        if let session = event.sessionID {
            EventEncoder.appendJSONString(session, to: &bytes)
        } else {
            bytes.append(contentsOf: "null".utf8)
        }
        bytes.append(contentsOf: #","parameters":"#.utf8)
        bytes.append(contentsOf: event.parametersJSON.utf8)
        bytes.append(UInt8(ascii: "}"))
    }
}
