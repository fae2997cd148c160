import Foundation
import SpoolStorage

/// An upload request body under construction: `format`'s prologue, the
/// events it writes (comma-separated), its epilogue; built by splicing the
/// stored bytes, never more than `maximumBytes` before compression.
struct UploadBody<Format: BatchFormat> {
    private let format: Format
    private var bytes: [UInt8] = []
    /// Written once at the start: its size is part of every bound check.
    private let epilogue: [UInt8]
    private let maximumBytes: Int
    private let maximumEventBytes: Int
    /// Events in the body so far.
    private(set) var count = 0

    /// What ``append(_:)`` did with an event.
    enum Appended {
        case added
        /// The body is full: the event starts the next one.
        case full
        /// The event alone is over the format's per-event limit; it can never
        /// be sent (only reported for the first event of a body).
        case oversized(bytes: Int)
    }

    init(format: Format, sentAt: Date = Date(), maximumBytes: Int, capacity: Int = 4_096) {
        self.format = format
        self.maximumBytes = maximumBytes
        maximumEventBytes = format.maximumEventBytes ?? .max
        var epilogue: [UInt8] = []
        format.appendEpilogue(sentAt: sentAt, to: &epilogue)
        self.epilogue = epilogue
        bytes.reserveCapacity(capacity)
        format.appendPrologue(sentAt: sentAt, to: &bytes)
    }

    /// Adds one event, unless the body would pass `maximumBytes` (the first
    /// event is always taken: one event is at most
    /// ``EventValue/maximumEncodedBytes`` plus its envelope, well under
    /// Spool's bound) or the event is over the format's per-event limit.
    mutating func append(_ row: EventRowView) -> Appended {
        // Written in place and taken back if it does not fit: one copy, not two.
        let mark = bytes.count
        if count > 0 { bytes.append(UInt8(ascii: ",")) }
        let start = bytes.count
        format.append(BatchEvent(row), to: &bytes)
        let eventBytes = bytes.count - start
        if eventBytes > maximumEventBytes {
            bytes.removeSubrange(mark...)
            return count == 0 ? .oversized(bytes: eventBytes) : .full
        }
        if count > 0 && bytes.count + epilogue.count > maximumBytes {
            bytes.removeSubrange(mark...)
            return .full
        }
        count += 1
        return .added
    }

    /// The finished body.
    consuming func finish() -> Data {
        bytes.append(contentsOf: epilogue)
        return Data(bytes)
    }
}

/// A batch ready to send: its body and the log positions it carries.
struct UploadBatch: Sendable {
    let body: Data
    /// In log order; never empty.
    let positions: [Int64]
    /// The first and last event's ids, and all of them as a JSON array, for
    /// the record of what was sent.
    let firstID: String
    let lastID: String
    let idsJSON: String

    var count: Int { positions.count }
    var first: Int64 { positions[0] }

    /// The batch id every send of these events carries (`Idempotency-Key`):
    /// its first and last events' ids, which no other batch shares. A
    /// collector that took it once took all of them.
    var key: String { count == 1 ? firstID : firstID + "_" + lastID }
    var last: Int64 { positions[positions.count - 1] }

    /// What reading the rows after a position found.
    enum Read: Sendable {
        case batch(UploadBatch)
        /// The next event is over the format's per-event limit: it can never
        /// be sent.
        case oversized(position: Int64, bytes: Int)
    }
}

extension UploadBatch {
    /// ``read(after:limit:format:maximumBytes:from:)`` with the built-in
    /// formats' code specialized (no witness calls per event), any other
    /// format through the protocol.
    static func read(
        after position: Int64, through last: Int64 = .max, limit: Int, anyFormat format: any BatchFormat,
        maximumBytes: Int = .max, now: Double, from connection: Connection
    ) throws -> Read? {
        switch format {
        case let spool as SpoolBatchFormat:
            return try read(
                after: position, through: last, limit: limit, format: spool, maximumBytes: maximumBytes,
                now: now, from: connection)
        case let segment as SegmentBatchFormat:
            return try read(
                after: position, through: last, limit: limit, format: segment, maximumBytes: maximumBytes,
                now: now, from: connection)
        case let kafka as KafkaRESTBatchFormat:
            return try read(
                after: position, through: last, limit: limit, format: kafka, maximumBytes: maximumBytes,
                now: now, from: connection)
        default:
            return try read(
                after: position, through: last, limit: limit, format: format, maximumBytes: maximumBytes,
                now: now, from: connection)
        }
    }

    /// Builds the next batch straight from the rows after `position` and up
    /// to `last` (no intermediate Strings): up to `limit` events, under
    /// `maximumBytes` and `format`'s own limits. Nil when no event is there.
    static func read(
        after position: Int64, through last: Int64 = .max, limit: Int, format: some BatchFormat,
        maximumBytes: Int = .max, now: Double, from connection: Connection
    ) throws -> Read? {
        let maximumBytes = min(maximumBytes, format.maximumBodyBytes)
        let limit = max(1, min(limit, format.maximumEventsPerRequest ?? .max))
        // Room for a batch of typical events without growing (a Segment call
        // with its context is about 700 bytes), never past the bound.
        var body = UploadBody(
            format: format, maximumBytes: maximumBytes, capacity: min(maximumBytes, limit * 1_024 + 256))
        var positions: [Int64] = []
        positions.reserveCapacity(limit)
        var oversized: Read?
        var firstID = ""
        var lastID: [UInt8] = []  // reused: no allocation per event
        var ids: [UInt8] = [UInt8(ascii: "[")]
        ids.reserveCapacity(limit * 39 + 2)
        try connection.forEachEventRow(after: position, limit: limit, now: now) { row in
            guard row.seq <= last else { return false }
            switch body.append(row) {
            case .added:
                if positions.isEmpty {
                    firstID = String(decoding: row.id, as: UTF8.self)
                } else {
                    ids.append(UInt8(ascii: ","))
                }
                // An id is a UUID: nothing in it to escape.
                ids.append(UInt8(ascii: "\""))
                ids.append(contentsOf: row.id)
                ids.append(UInt8(ascii: "\""))
                positions.append(row.seq)
                lastID.removeAll(keepingCapacity: true)
                lastID.append(contentsOf: row.id)
                return true
            case .full:
                return false
            case .oversized(let bytes):
                oversized = .oversized(position: row.seq, bytes: bytes)
                return false
            }
        }
        if let oversized { return oversized }
        guard !positions.isEmpty else { return nil }
        return .batch(
            UploadBatch(
                body: body.finish(), positions: positions, firstID: firstID,
                lastID: String(decoding: lastID, as: UTF8.self),
                idsJSON: String(decoding: ids + [UInt8(ascii: "]")], as: UTF8.self)))
    }
}
