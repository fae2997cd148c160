import Foundation

/// The rows of one ``Connection/forEachEventRow(after:limit:now:_:)`` on a
/// connection with a sealer, read a chunk at a time: each row is copied out
/// of SQLite as the statement steps, then the chunk's sealed parameters are
/// opened back to back (``SealingSession/openInRun(_:for:into:)``), then
/// the rows are handed on. Building an upload batch between two openings
/// would evict the cipher's code and tables from the processor's caches.
///
/// An identity's and a context's sealed values are opened once per call and
/// kept. Each row's bytes, and its parameters opened, sit in one buffer,
/// reused from chunk to chunk and, through the session
/// (``SealingSession/spareRowBuffers``), from one call to the next:
/// ``release()`` hands the buffers back.
struct OpenedEventRows {
    /// How many rows are read and opened before they are handed on: an
    /// upload batch of 100 at once.
    static let chunk = 128

    /// Where a copied row's columns sit in ``bytes``.
    private struct Row {
        var seq: Int64
        var recordedAt: Double
        var id: Range<Int>
        var name: Range<Int>
        var parameters: Range<Int>
        var type: Range<Int>
        var session: Range<Int>?
        var target: Range<Int>?
        var anonymousID: Range<Int>?
        var userID: Range<Int>?
        var traits: Range<Int>?
        var context: Range<Int>?
        var launch: (id: Int64, milliseconds: Int64)?
        /// The sealed parameters (and target), opened into `parameters`.
        var sealed: Range<Int>?
        /// False once one of its sealed values would not open.
        var opens = true
    }

    /// Where an identity's opened values sit in ``kept``.
    private struct Identity {
        var userID: Range<Int>?
        var traits: Range<Int>
    }

    private let sealing: SealingSession
    private var rows: [Row] = []
    /// The chunk's rows.
    private var bytes = ByteArena()
    /// The identities met, by row id: nil for one that will not open.
    private var identities: [Int64: Identity?] = [:]
    private var lastIdentity: (id: Int64, value: Identity?)?
    /// The contexts met, by row id: nil for one that will not open.
    private var contexts: [Int64: Range<Int>?] = [:]
    private var lastContext: (id: Int64, value: Range<Int>?)?
    /// The identities' and contexts' opened values.
    private var kept = ByteArena()

    /// The most bytes a buffer may hold and still be kept for the next
    /// call: an upload batch's rows of a few kilobytes each. One that grew
    /// past it (rows of large events) is freed, so what the connection
    /// keeps stays small.
    static let sparedCapacity = 1 << 20

    /// Rows read with `sealing`'s keys, in the buffers it kept, if any.
    init(_ sealing: SealingSession) {
        self.sealing = sealing
        if let spare = sealing.spareRowBuffers {
            sealing.spareRowBuffers = nil
            (bytes, kept) = spare
        }
    }

    /// Hands the buffers back to the session for the next call, emptied;
    /// frees them instead when one grew past ``sparedCapacity`` or the
    /// session already holds others.
    func release() {
        guard sealing.spareRowBuffers == nil, bytes.capacity <= Self.sparedCapacity,
            kept.capacity <= Self.sparedCapacity
        else {
            bytes.deallocate()
            kept.deallocate()
            return
        }
        var (bytes, kept) = (bytes, kept)
        bytes.removeAll()
        kept.removeAll()
        sealing.spareRowBuffers = (bytes, kept)
    }

    /// Steps `statement` (``Connection/forEachEventRow(after:limit:now:_:)``'s)
    /// to its end, calling `body` with each row whose sealed values open,
    /// plaintext in their place, until it returns false. The positions of
    /// rows passed over because a value would not open join `closed`.
    mutating func forEach(
        in statement: Statement, on connection: Connection, closed: inout [Int64],
        _ body: (EventRowView) throws -> Bool
    ) throws {
        sealing.takeKeys()
        var stepped = true
        while stepped {
            rows.removeAll(keepingCapacity: true)
            bytes.removeAll()
            while rows.count < Self.chunk {
                stepped = try statement.step()
                guard stepped else { break }
                try connection.requireWithinHead(statement.int64(at: 0))
                copy(statement, on: connection)
            }
            openParameters()
            for row in rows {
                guard row.opens else {
                    closed.append(row.seq)
                    continue
                }
                guard try body(view(row)) else { return }
            }
        }
    }

    // MARK: - Reading

    /// Copies the row `statement` stands on; its identity's and context's
    /// sealed values are opened now (or taken from those already open),
    /// its parameters are left for ``openParameters()``.
    private mutating func copy(_ statement: Statement, on connection: Connection) {
        let readable = Connection.eventRow(statement)
        let sealed = Connection.sealedValues(statement)
        var row = Row(
            seq: readable.seq, recordedAt: readable.recordedAt, id: bytes.append(readable.id),
            name: bytes.append(readable.name), parameters: 0..<0, type: bytes.append(readable.type),
            session: readable.session.map { bytes.append($0) }, target: readable.target.map { bytes.append($0) },
            anonymousID: readable.anonymousID.map { bytes.append($0) }, launch: readable.launch)
        if let parameters = sealed?.parameters {
            row.sealed = bytes.append(parameters)
            row.parameters = bytes.reserve(RowSealer.plaintextCount(of: parameters))
        } else {
            row.parameters = bytes.append(readable.parameters)
        }
        if let sealedIdentity = sealed?.identity {
            if let person = identity(statement.int64(at: 12), sealedIdentity, on: connection) {
                row.userID = person.userID.map { bytes.append(kept[$0]) }
                row.traits = bytes.append(kept[person.traits])
            } else {
                row.opens = false
            }
        } else {
            row.userID = readable.userID.map { bytes.append($0) }
            row.traits = readable.traits.map { bytes.append($0) }
        }
        if let sealedContext = sealed?.context {
            if let json = context(statement.int64(at: 13), sealedContext) {
                row.context = bytes.append(kept[json])
            } else {
                row.opens = false
            }
        } else {
            row.context = readable.context.map { bytes.append($0) }
        }
        rows.append(row)
    }

    /// Opens the chunk's sealed parameters (and targets,
    /// ``SealedEventValue``), one after another, each into the room its row
    /// set aside.
    private mutating func openParameters() {
        for index in rows.indices where rows[index].opens {
            guard let sealed = rows[index].sealed else { continue }
            let room = rows[index].parameters
            guard
                let count = sealing.openInRun(
                    bytes[sealed], for: .event(bytes[rows[index].id]), into: bytes.mutable(room)),
                let parts = SealedEventValue.split(bytes[room.lowerBound..<(room.lowerBound + count)])
            else {
                rows[index].opens = false
                continue
            }
            let shift = { (part: Range<Int>) in
                (room.lowerBound + part.lowerBound)..<(room.lowerBound + part.upperBound)
            }
            rows[index].parameters = shift(parts.parameters)
            if let target = parts.target { rows[index].target = shift(target) }
        }
    }

    /// `row` as ``Connection/forEachEventRow(after:limit:now:_:)`` hands it
    /// on: valid until the next chunk is read.
    private func view(_ row: Row) -> EventRowView {
        EventRowView(
            seq: row.seq, id: bytes[row.id], name: bytes[row.name], recordedAt: row.recordedAt,
            session: row.session.map { bytes[$0] }, parameters: bytes[row.parameters], type: bytes[row.type],
            target: row.target.map { bytes[$0] }, anonymousID: row.anonymousID.map { bytes[$0] },
            userID: row.userID.map { bytes[$0] }, traits: row.traits.map { bytes[$0] },
            context: row.context.map { bytes[$0] }, launch: row.launch)
    }

    // MARK: - Identities and contexts

    /// The identity `id`, opened from `sealed` the first time it is met.
    private mutating func identity(_ id: Int64, _ sealed: UnsafeRawBufferPointer, on connection: Connection)
        -> Identity?
    {
        if let last = lastIdentity, last.id == id { return last.value }
        let value: Identity?
        if let known = identities[id] {
            value = known
        } else {
            value = connection.openIdentity(sealed, row: id).map { person in
                Identity(
                    userID: person.userID.map { withUTF8Bytes(of: $0) { kept.append(UnsafeRawBufferPointer($0)) } },
                    traits: withUTF8Bytes(of: person.traitsJSON) { kept.append(UnsafeRawBufferPointer($0)) })
            }
            identities[id] = .some(value)
        }
        lastIdentity = (id, value)
        return value
    }

    /// The context `id`, opened from `sealed` the first time it is met.
    private mutating func context(_ id: Int64, _ sealed: UnsafeRawBufferPointer) -> Range<Int>? {
        if let last = lastContext, last.id == id { return last.value }
        let value: Range<Int>?
        if let known = contexts[id] {
            value = known
        } else {
            value = sealing.open(sealed, for: .context(id)).map { json in json.withUnsafeBytes { kept.append($0) } }
            contexts[id] = .some(value)
        }
        lastContext = (id, value)
        return value
    }
}

/// Bytes appended one value after another into one allocation, which grows
/// as needed (a value is found again by its range, which stays put).
struct ByteArena {
    private var storage = UnsafeMutableRawBufferPointer(start: nil, count: 0)
    private(set) var count = 0

    /// The bytes allocated.
    var capacity: Int { storage.count }

    /// The bytes in `range`: valid until the buffer next grows.
    subscript(range: Range<Int>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: storage[range])
    }

    /// The bytes in `range`, to write: valid until the buffer next grows.
    func mutable(_ range: Range<Int>) -> UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(rebasing: storage[range])
    }

    /// Appends a copy of `bytes` and returns where it sits.
    @inline(__always)
    mutating func append(_ bytes: UnsafeRawBufferPointer) -> Range<Int> {
        let range = reserve(bytes.count)
        if !bytes.isEmpty { mutable(range).copyMemory(from: bytes) }
        return range
    }

    /// Sets `count` bytes aside, uninitialized, and returns where they sit.
    @inline(__always)
    mutating func reserve(_ count: Int) -> Range<Int> {
        let start = self.count
        if storage.count < start + count { grow(to: start + count) }
        self.count = start + count
        return start..<self.count
    }

    /// Moves the bytes to an allocation of at least `count` bytes.
    private mutating func grow(to count: Int) {
        let larger = UnsafeMutableRawBufferPointer.allocate(
            byteCount: max(count, 2 * storage.count, 4_096), alignment: 8)
        if self.count > 0 { larger.copyMemory(from: UnsafeRawBufferPointer(rebasing: storage[..<self.count])) }
        storage.deallocate()
        storage = larger
    }

    /// Forgets the values, keeping the allocation.
    mutating func removeAll() {
        count = 0
    }

    /// Frees the allocation.
    func deallocate() {
        storage.deallocate()
    }
}
