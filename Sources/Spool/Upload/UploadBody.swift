import Foundation
import SpoolStorage

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
struct UploadBody {
    /// No request body is larger (D6); the collector's documented limit.
    static let maximumBytes = 3_500_000

    private var bytes: [UInt8] = []
    private let maximumBytes: Int
    /// Events in the body so far.
    private(set) var count = 0

    init(sentAt: Date = Date(), maximumBytes: Int = UploadBody.maximumBytes, capacity: Int = 4_096) {
        self.maximumBytes = maximumBytes
        bytes.reserveCapacity(capacity)
        bytes.append(contentsOf: #"{"sentAt":""#.utf8)
        ISO8601Milliseconds.append(sentAt, to: &bytes)
        bytes.append(contentsOf: #"","events":["#.utf8)
    }

    /// Adds one event from its raw UTF-8 columns, unless the body would pass
    /// `maximumBytes` (the first event is always taken: one event is at most
    /// ``EventLimits/maximumEncodedBytes`` plus its envelope).
    ///
    /// - Returns: false when it did not fit.
    mutating func append(
        id: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer, recordedAt: Double,
        session: UnsafeRawBufferPointer?, parameters: UnsafeRawBufferPointer
    ) -> Bool {
        // Written in place and taken back if it does not fit: one copy, not two.
        let mark = bytes.count
        if count > 0 { bytes.append(UInt8(ascii: ",")) }
        bytes.append(contentsOf: #"{"id":"#.utf8)
        EventEncoder.appendJSONString(id, to: &bytes)
        bytes.append(contentsOf: #","name":"#.utf8)
        EventEncoder.appendJSONString(name, to: &bytes)
        bytes.append(contentsOf: #","timestamp":""#.utf8)
        ISO8601Milliseconds.append(Date(timeIntervalSince1970: recordedAt), to: &bytes)
        bytes.append(contentsOf: #"","session":"#.utf8)
        if let session {
            EventEncoder.appendJSONString(session, to: &bytes)
        } else {
            bytes.append(contentsOf: "null".utf8)
        }
        bytes.append(contentsOf: #","parameters":"#.utf8)
        bytes.append(contentsOf: parameters)
        bytes.append(UInt8(ascii: "}"))
        // 2 bytes for the closing "]}".
        if count > 0 && bytes.count + 2 > maximumBytes {
            bytes.removeSubrange(mark...)
            return false
        }
        count += 1
        return true
    }

    /// The finished body.
    consuming func finish() -> Data {
        bytes.append(contentsOf: "]}".utf8)
        return Data(bytes)
    }
}

/// A batch ready to send: its body and the log positions it carries.
struct UploadBatch: Sendable {
    let body: Data
    /// In log order; never empty.
    let positions: [Int64]

    var count: Int { positions.count }
    var first: Int64 { positions[0] }
    var last: Int64 { positions[positions.count - 1] }
}

extension UploadBatch {
    /// Builds the next batch straight from the rows after `position` (no
    /// intermediate Strings): up to `limit` events, under `maximumBytes`.
    static func read(
        after position: Int64, limit: Int, maximumBytes: Int = UploadBody.maximumBytes, from connection: Connection
    ) throws -> UploadBatch? {
        var body = UploadBody(maximumBytes: maximumBytes, capacity: min(maximumBytes, limit * 400 + 64))
        var positions: [Int64] = []
        positions.reserveCapacity(limit)
        try connection.forEachEventRow(after: position, limit: limit) { row in
            guard
                body.append(
                    id: row.id, name: row.name, recordedAt: row.recordedAt, session: row.session,
                    parameters: row.parameters)
            else { return false }
            positions.append(row.seq)
            return true
        }
        guard !positions.isEmpty else { return nil }
        return UploadBatch(body: body.finish(), positions: positions)
    }
}
