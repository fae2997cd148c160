import Foundation

/// The rows of one ``Connection/forEachEventRow(after:limit:now:_:)`` on a
/// connection with a sealer, read a chunk at a time: each row is copied out
/// of SQLite as the statement steps, then the chunk's sealed parameters are
/// opened back to back (``SealingSession/openInRun(_:for:into:)``), then
/// the rows are handed on. Building an upload batch between two openings
/// would evict the cipher's code and tables from the processor's caches.
///
/// An identity's and a context's sealed values are opened once per call and
/// kept (``EventPeople``). Each row's bytes, and its parameters opened, sit in one buffer,
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

    private let sealing: SealingSession
    private var rows: [Row] = []
    /// The chunk's rows.
    private var bytes = ByteArena()
    /// The identities and contexts met, opened.
    private var people: EventPeople

    /// The most bytes a buffer may hold and still be kept for the next
    /// call: an upload batch's rows of a few kilobytes each. One that grew
    /// past it (rows of large events) is freed, so what the connection
    /// keeps stays small.
    static let sparedCapacity = 1 << 20

    /// Rows read with `sealing`'s keys, in the buffers it kept, if any.
    init(_ sealing: SealingSession) {
        self.sealing = sealing
        var kept = ByteArena()
        if let spare = sealing.spareRowBuffers {
            sealing.spareRowBuffers = nil
            (bytes, kept) = spare
        }
        people = EventPeople(sealing, keeping: kept)
    }

    /// Hands the buffers back to the session for the next call, emptied;
    /// frees them instead when one grew past ``sparedCapacity`` or the
    /// session already holds others.
    func release() {
        guard sealing.spareRowBuffers == nil, bytes.capacity <= Self.sparedCapacity,
            people.kept.capacity <= Self.sparedCapacity
        else {
            bytes.deallocate()
            people.kept.deallocate()
            return
        }
        var (bytes, kept) = (bytes, people.kept)
        bytes.removeAll()
        kept.removeAll()
        sealing.spareRowBuffers = (bytes, kept)
    }

    /// Steps `statement` (``EventPeople/sql``'s)
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
                try copy(statement, on: connection)
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
    private mutating func copy(_ statement: Statement, on connection: Connection) throws {
        var row = Row(
            seq: statement.int64(at: 0), recordedAt: statement.double(at: 3), id: bytes.append(statement.bytes(at: 1)),
            name: bytes.append(statement.bytes(at: 2)), parameters: 0..<0, type: bytes.append(statement.bytes(at: 6)),
            session: statement.optionalBytes(at: 4).map { bytes.append($0) },
            target: statement.optionalBytes(at: 7).map { bytes.append($0) }, launch: Connection.launch(statement))
        if let parameters = statement.blob(at: 10) {
            row.sealed = bytes.append(parameters)
            row.parameters = bytes.reserve(RowSealer.plaintextCount(of: parameters))
        } else {
            row.parameters = bytes.append(statement.bytes(at: 5))
        }
        switch try people.identity(of: statement, on: connection) {
        case .missing: break
        case .unopened: row.opens = false
        case .values(let person):
            row.anonymousID = bytes.append(people[person.anonymousID])
            row.userID = person.userID.map { bytes.append(people[$0]) }
            row.traits = bytes.append(people[person.traits])
        }
        switch try people.context(of: statement, on: connection) {
        case .missing: break
        case .unopened: row.opens = false
        case .values(let json): row.context = bytes.append(people[json])
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
