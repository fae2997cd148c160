import Foundation
import SpoolStorage

/// When a body is built, on which clocks: its `sentAt`, and what each
/// event's age is measured from.
struct BatchClock: Sendable {
    /// The wall clock's seconds since 1970.
    let sentAt: Double
    /// `sentAt` in whole milliseconds, as the body writes it.
    let sentAtMilliseconds: Int64
    /// `sentAt` as the body writes it, `"2026-11-29T10:15:31.002Z"`: its 26
    /// bytes, formatted once for every record that repeats it (a Kafka
    /// REST record's value), held inline.
    private let sentAtText: (UInt64, UInt64, UInt64, UInt16)
    /// The launch building the body (``EventLog/Launch``) and its monotonic
    /// clock's reading now, in milliseconds from its origin; nil without a
    /// monotonic clock.
    let launch: (id: Int64, now: Int64)?

    init(sentAt: Double, launch: (id: Int64, now: Int64)? = nil) {
        self.sentAt = sentAt
        sentAtMilliseconds = EventLog.Launch.milliseconds(sentAt)
        var text: [UInt8] = []
        BatchEvent.appendTimestamp(Date(timeIntervalSince1970: sentAt), to: &text)
        var inline: (UInt64, UInt64, UInt64, UInt16) = (0, 0, 0, 0)
        withUnsafeMutableBytes(of: &inline) { $0.copyBytes(from: text.prefix(26)) }
        sentAtText = inline
        self.launch = launch
    }

    /// Appends `sentAt` as a JSON string.
    func appendSentAt(to body: inout [UInt8]) {
        withUnsafeBytes(of: sentAtText) { body.append(contentsOf: $0) }
    }

    /// Now, on `clock`, for a body `launch` builds.
    init(_ clock: any SpoolClock, launch: EventLog.Launch?) {
        let reading = launch.flatMap { launch in clock.monotonic.map { (launch.id, launch.milliseconds(at: $0)) } }
        self.init(sentAt: clock.now, launch: reading)
    }
}

/// A format whose body carries the loss a request reports (Spool's own);
/// every other format's requests carry it in the `X-Spool-Loss` header.
protocol LossReportingFormat: BatchFormat {
    /// Appends what comes before the first event, `loss` among it.
    func appendPrologue(sentAt: Date, loss: LossCounts, to body: inout [UInt8])
}

/// An upload request body under construction: `format`'s prologue, the
/// events it writes (comma-separated), its epilogue; built by splicing the
/// stored bytes, never more than `maximumBytes` before compression.
struct UploadBody<Format: BatchFormat> {
    private let format: Format
    private let clock: BatchClock
    private var bytes: [UInt8] = []
    /// Written once at the start: its size is part of every bound check.
    private let epilogue: [UInt8]
    private let maximumBytes: Int
    private let maximumEventBytes: Int
    /// Events in the body so far.
    private(set) var count = 0
    /// Whether the body carries the loss it was given (else the request's
    /// header does).
    let carriesLoss: Bool

    /// What ``append(_:)`` did with an event.
    enum Appended {
        case added
        /// The body is full: the event starts the next one.
        case full
        /// The event alone is over the format's per-event limit; it can never
        /// be sent (only reported for the first event of a body).
        case oversized(bytes: Int)
    }

    init(
        format: Format, clock: BatchClock, loss: LossCounts = LossCounts(), maximumBytes: Int, capacity: Int = 4_096
    ) {
        self.format = format
        self.clock = clock
        self.maximumBytes = maximumBytes
        maximumEventBytes = format.maximumEventBytes ?? .max
        let sentAt = Date(timeIntervalSince1970: clock.sentAt)
        var epilogue: [UInt8] = []
        format.appendEpilogue(sentAt: sentAt, to: &epilogue)
        self.epilogue = epilogue
        bytes.reserveCapacity(capacity)
        if let reporting = format as? any LossReportingFormat {
            reporting.appendPrologue(sentAt: sentAt, loss: loss, to: &bytes)
            carriesLoss = true
        } else {
            format.appendPrologue(sentAt: sentAt, to: &bytes)
            carriesLoss = false
        }
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
        format.append(BatchEvent(row, clock: clock), to: &bytes)
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
    /// The loss the request reports, and whether its body carries it.
    var loss = LossCounts()
    var lossInBody = false

    /// The `X-Spool-Loss` header's value, when the body does not carry the
    /// loss.
    var lossHeader: String? { lossInBody ? nil : loss.headerValue }

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
        clock: BatchClock, loss: LossCounts = LossCounts(), maximumBytes: Int = .max, from connection: Connection
    ) throws -> Read? {
        switch format {
        case let spool as SpoolBatchFormat:
            return try read(
                after: position, through: last, limit: limit, format: spool, clock: clock, loss: loss,
                maximumBytes: maximumBytes, from: connection)
        case let segment as SegmentBatchFormat:
            return try read(
                after: position, through: last, limit: limit, format: segment, clock: clock, loss: loss,
                maximumBytes: maximumBytes, from: connection)
        case let kafka as KafkaRESTBatchFormat:
            return try read(
                after: position, through: last, limit: limit, format: kafka, clock: clock, loss: loss,
                maximumBytes: maximumBytes, from: connection)
        default:
            return try read(
                after: position, through: last, limit: limit, format: format, clock: clock, loss: loss,
                maximumBytes: maximumBytes, from: connection)
        }
    }

    /// The most events a batch read with `limit` through `format` holds.
    static func eventLimit(_ limit: Int, _ format: any BatchFormat) -> Int {
        max(1, min(limit, format.maximumEventsPerRequest ?? .max))
    }

    /// Builds the next batch straight from the rows after `position` and up
    /// to `last` (no intermediate Strings): up to `limit` events, under
    /// `maximumBytes` and `format`'s own limits, built at `clock`'s time and
    /// reporting `loss`. Nil when no event is there.
    static func read(
        after position: Int64, through last: Int64 = .max, limit: Int, format: some BatchFormat,
        clock: BatchClock, loss: LossCounts = LossCounts(), maximumBytes: Int = .max, from connection: Connection
    ) throws -> Read? {
        let maximumBytes = min(maximumBytes, format.maximumBodyBytes)
        let limit = eventLimit(limit, format)
        // Room for a batch of typical events without growing (a Segment call
        // with its context is about 700 bytes), never past the bound; a
        // limit from a batch's bound (a span of positions) can be far larger
        // than its events.
        let expected = min(limit, 10_000)
        var body = UploadBody(
            format: format, clock: clock, loss: loss, maximumBytes: maximumBytes,
            capacity: min(maximumBytes, expected * 1_024 + 256))
        let lossInBody = body.carriesLoss
        var positions: [Int64] = []
        positions.reserveCapacity(expected)
        var oversized: Read?
        var firstID = ""
        var lastID: [UInt8] = []  // reused: no allocation per event
        var ids: [UInt8] = [UInt8(ascii: "[")]
        ids.reserveCapacity(expected * 39 + 2)
        // Rows that all stayed closed were set aside (and left the log):
        // read the ones after them, as the next batch.
        var setAside = 0
        repeat {
            setAside = try connection.forEachEventRow(after: position, limit: limit, now: clock.sentAt) { row in
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
        } while positions.isEmpty && oversized == nil && setAside > 0
        if let oversized { return oversized }
        guard !positions.isEmpty else { return nil }
        return .batch(
            UploadBatch(
                body: body.finish(), positions: positions, firstID: firstID,
                lastID: String(decoding: lastID, as: UTF8.self),
                idsJSON: String(decoding: ids + [UInt8(ascii: "]")], as: UTF8.self), loss: loss,
                lossInBody: lossInBody))
    }
}
