import Foundation

/// One owner's sealing and opening with a ``RowSealer``'s keys: each key
/// prepared by the cipher once, random bytes for nonces, and the buffers a
/// value and its associated data are written to, all kept from one value
/// to the next.
///
/// Not Sendable: a prepared key may hold cipher state that is not safe to
/// share between threads. Each ``Connection`` holds its own
/// (``Connection/sealing``), used on the connection's serial executor only.
///
/// The session takes the sealer's keys (its current key, and whether the
/// keys it prepared still count) at ``takeKeys()``: each ``seal(_:for:)``
/// and ``open(_:for:into:)`` takes them first, and a run of values
/// (``startRun()`` then ``sealInRun(_:for:)``, or ``takeKeys()`` then
/// ``openInRun(_:for:into:)``) uses the keys taken at its start, so that a
/// value costs no lock.
///
/// A sealed value is, in order: the format version (1 byte), the key id's
/// length (1 byte) and UTF-8, the nonce (12 bytes), the ciphertext and
/// the tag (16 bytes). The associated data is the format version, the key
/// id's length and id, then the row (``SealedRow``): `e` and the event id,
/// or `i` or `c` and the row id (8 bytes, big-endian).
package final class SealingSession {
    package let sealer: RowSealer

    /// A key as the cipher prepared it for this session.
    private final class Prepared {
        let id: [UInt8]
        let cipher: any PreparedSealingKey

        init(id: [UInt8], cipher: any PreparedSealingKey) {
            self.id = id
            self.cipher = cipher
        }
    }

    // The session's state is unchecked for exclusive access: the class is
    // used by one owner at a time (it is not Sendable), and no access to a
    // property overlaps another to it. Each check is a lookup in a
    // thread-local set, a visible share of the bookkeeping around a seal.

    /// The sealer's generation the keys below were prepared in; when the
    /// sealer reads its current key again, they are dropped.
    @exclusivity(unchecked) private var generation = -1
    @exclusivity(unchecked) private var current: Prepared?
    /// Other keys values were opened with, in the order first met.
    @exclusivity(unchecked) private var others: [Prepared] = []
    /// Random bytes for nonces, taken 12 at a time from `randomOffset`.
    private let random = UnsafeMutableRawBufferPointer.allocate(byteCount: RowSealer.nonceBytes * 256, alignment: 8)
    @exclusivity(unchecked) private var randomOffset = Int.max
    /// The last value sealed by ``seal(_:for:)``, at its start.
    @exclusivity(unchecked) private var sealed = UnsafeMutableRawBufferPointer.allocate(byteCount: 512, alignment: 8)
    /// The values of the run (``startRun()``), one after another, up to `runEnd`.
    @exclusivity(unchecked) private var run = UnsafeMutableRawBufferPointer(start: nil, count: 0)
    @exclusivity(unchecked) private var runEnd = 0
    /// The associated data of the value being sealed or opened.
    @exclusivity(unchecked) private var associatedData = UnsafeMutableRawBufferPointer.allocate(
        byteCount: 128, alignment: 8)
    /// The buffers of the last read of event rows (``OpenedEventRows``),
    /// emptied and kept for the next, so that a read does not allocate
    /// them again; nil while a read holds them.
    var spareRowBuffers: (rows: ByteArena, kept: ByteArena)?

    package init(sealer: RowSealer) {
        self.sealer = sealer
    }

    deinit {
        random.deallocate()
        sealed.deallocate()
        run.deallocate()
        associatedData.deallocate()
        spareRowBuffers?.rows.deallocate()
        spareRowBuffers?.kept.deallocate()
    }

    // MARK: - Sealing

    /// Seals `plaintext` for `row` with the current key and a fresh nonce.
    ///
    /// - Returns: the sealed value, in this session's buffer: valid until
    ///   the session's next `seal`.
    package func seal(_ plaintext: UnsafeRawBufferPointer, for row: SealedRow) throws -> UnsafeRawBufferPointer {
        takeKeys()
        let count = try seal(plaintext, for: row, into: &sealed, at: 0)
        return UnsafeRawBufferPointer(rebasing: sealed[..<count])
    }

    // MARK: - Runs

    /// Takes the sealer's keys as they are now, for the values that follow:
    /// a key read again (``RowSealer/refreshCurrentKey()``) seals them, and
    /// keys prepared before it are asked of the sealer again.
    package func takeKeys() {
        adopt(sealer.generation)
    }

    /// Starts a run of values sealed one after another
    /// (``sealInRun(_:for:)``), forgetting the previous run's, and takes the
    /// sealer's keys for it.
    ///
    /// A writer seals a run of rows before it inserts them: sealed back to
    /// back, values find the cipher's code and tables still in the
    /// processor's caches, which an insert between two of them evicts.
    package func startRun() {
        takeKeys()
        runEnd = 0
    }

    /// Seals `plaintext` for `row`, as ``seal(_:for:)`` does, after the
    /// run's other values, with the keys taken at the run's start.
    ///
    /// - Returns: where the value sits in the run (``sealedInRun(_:)``).
    package func sealInRun(_ plaintext: UnsafeRawBufferPointer, for row: SealedRow) throws -> Range<Int> {
        let start = runEnd
        runEnd = try seal(plaintext, for: row, into: &run, at: start)
        return start..<runEnd
    }

    /// The bytes of a value of the current run: valid until the next
    /// ``startRun()`` or ``sealInRun(_:for:)``.
    package func sealedInRun(_ range: Range<Int>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: run[range])
    }

    /// Seals `plaintext` for `row` into `buffer` at `start` (the buffer
    /// grows as needed, keeping the bytes before `start`) and returns where
    /// the value ends.
    private func seal(
        _ plaintext: UnsafeRawBufferPointer, for row: SealedRow, into buffer: inout UnsafeMutableRawBufferPointer,
        at start: Int
    ) throws -> Int {
        let key = try currentKey()
        let header = start + 2 + key.id.count
        let nonceEnd = header + RowSealer.nonceBytes
        let end = nonceEnd + plaintext.count + RowSealer.tagBytes
        if buffer.count < end { Self.grow(&buffer, to: end, keeping: start) }
        buffer[start] = RowSealer.formatVersion
        buffer[start + 1] = UInt8(key.id.count)
        let id = UnsafeMutableRawBufferPointer(rebasing: buffer[(start + 2)..<header])
        key.id.withUnsafeBytes { id.copyMemory(from: $0) }
        let nonce = UnsafeMutableRawBufferPointer(rebasing: buffer[header..<nonceEnd])
        try takeNonce(into: nonce)
        try key.cipher.seal(
            nonce: UnsafeRawBufferPointer(nonce), plaintext: plaintext,
            associatedData: associatedData(keyID: UnsafeRawBufferPointer(id), row: row),
            into: UnsafeMutableRawBufferPointer(rebasing: buffer[nonceEnd..<end]))
        return end
    }

    /// The current key, prepared.
    private func currentKey() throws -> Prepared {
        if let current { return current }
        let (key, generation) = try sealer.current()
        adopt(generation)
        let prepared = Prepared(id: key.id, cipher: try sealer.prepare(key.bytes))
        current = prepared
        return prepared
    }

    /// Copies 12 random bytes into `nonce`, reading 256 nonces' worth from
    /// the cipher's random source when none are left.
    private func takeNonce(into nonce: UnsafeMutableRawBufferPointer) throws {
        if randomOffset > random.count - RowSealer.nonceBytes {
            try sealer.cipher.fillRandom(random)
            randomOffset = 0
        }
        nonce.copyMemory(
            from: UnsafeRawBufferPointer(rebasing: random[randomOffset..<(randomOffset + RowSealer.nonceBytes)]))
        randomOffset += RowSealer.nonceBytes
    }

    // MARK: - Opening

    /// The plaintext of `sealed`, or nil when it will not open: its key is
    /// not available, or its bytes, its header or its row changed.
    package func open(_ sealed: UnsafeRawBufferPointer, for row: SealedRow) -> [UInt8]? {
        let count = RowSealer.plaintextCount(of: sealed)
        var opened = false
        let plaintext = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            opened = open(sealed, for: row, into: UnsafeMutableRawBufferPointer(buffer)) != nil
            initialized = opened ? count : 0
        }
        return opened ? plaintext : nil
    }

    /// Writes the plaintext of `sealed` to the start of `output` (at least
    /// ``RowSealer/plaintextCount(of:)`` bytes) and returns its length; nil
    /// when it will not open.
    package func open(_ sealed: UnsafeRawBufferPointer, for row: SealedRow, into output: UnsafeMutableRawBufferPointer)
        -> Int?
    {
        takeKeys()
        return openInRun(sealed, for: row, into: output)
    }

    /// Opens a value of a run, as ``open(_:for:into:)`` does, with the keys
    /// taken at the last ``takeKeys()``.
    ///
    /// A reader opens a run of rows' values back to back, for the same
    /// reason a writer seals them in runs (``startRun()``).
    package func openInRun(
        _ sealed: UnsafeRawBufferPointer, for row: SealedRow, into output: UnsafeMutableRawBufferPointer
    )
        -> Int?
    {
        guard sealed.count >= 2, sealed[0] == RowSealer.formatVersion else { return nil }
        let idEnd = 2 + Int(sealed[1])
        let nonceEnd = idEnd + RowSealer.nonceBytes
        let tagStart = sealed.count - RowSealer.tagBytes
        guard sealed[1] > 0, tagStart >= nonceEnd else { return nil }
        let id = UnsafeRawBufferPointer(rebasing: sealed[2..<idEnd])
        let ciphertext = UnsafeRawBufferPointer(rebasing: sealed[nonceEnd..<tagStart])
        guard output.count >= ciphertext.count, let key = key(id: id) else { return nil }
        let opened = key.cipher.open(
            nonce: UnsafeRawBufferPointer(rebasing: sealed[idEnd..<nonceEnd]), ciphertext: ciphertext,
            tag: UnsafeRawBufferPointer(rebasing: sealed[tagStart...]),
            associatedData: associatedData(keyID: id, row: row),
            into: UnsafeMutableRawBufferPointer(rebasing: output[..<ciphertext.count]))
        return opened ? ciphertext.count : nil
    }

    /// The key with `id`, prepared: the sealer's (which asks the provider
    /// for a key it does not hold) the first time this session meets it.
    private func key(id: UnsafeRawBufferPointer) -> Prepared? {
        if let current, Self.same(current.id, id) { return current }
        if let other = others.first(where: { Self.same($0.id, id) }) { return other }
        guard let (key, generation) = sealer.key(id: id) else { return nil }
        do {
            let prepared = Prepared(id: key.id, cipher: try sealer.prepare(key.bytes))
            adopt(generation)
            others.append(prepared)
            return prepared
        } catch {
            // A key the cipher does not take leaves the value closed, as a
            // key the provider does not give: its row is set aside and
            // reported, never sent.
            return nil
        }
    }

    // MARK: - Helpers

    /// Drops the keys prepared in another generation of the sealer's.
    private func adopt(_ generation: Int) {
        guard generation != self.generation else { return }
        self.generation = generation
        current = nil
        others.removeAll()
    }

    /// The associated data bound to a value, in this session's buffer: its
    /// header (format and key id) and its row, which also names the row's
    /// table.
    private func associatedData(keyID: UnsafeRawBufferPointer, row: SealedRow) -> UnsafeRawBufferPointer {
        let rowStart = 3 + keyID.count
        let count: Int
        switch row {
        case .event(let id): count = rowStart + id.count
        case .identity, .context: count = rowStart + 8
        }
        if associatedData.count < count { Self.grow(&associatedData, to: count, keeping: 0) }
        let data = associatedData
        data[0] = RowSealer.formatVersion
        data[1] = UInt8(keyID.count)
        UnsafeMutableRawBufferPointer(rebasing: data[2..<(2 + keyID.count)]).copyMemory(from: keyID)
        let rest = UnsafeMutableRawBufferPointer(rebasing: data[rowStart..<count])
        switch row {
        case .event(let id):
            data[rowStart - 1] = UInt8(ascii: "e")
            rest.copyMemory(from: id)
        case .identity(let id):
            data[rowStart - 1] = UInt8(ascii: "i")
            withUnsafeBytes(of: id.bigEndian) { rest.copyMemory(from: $0) }
        case .context(let id):
            data[rowStart - 1] = UInt8(ascii: "c")
            withUnsafeBytes(of: id.bigEndian) { rest.copyMemory(from: $0) }
        }
        return UnsafeRawBufferPointer(rebasing: data[..<count])
    }

    /// Replaces `buffer` with a larger one that starts with its first
    /// `kept` bytes.
    private static func grow(_ buffer: inout UnsafeMutableRawBufferPointer, to count: Int, keeping kept: Int) {
        let larger = UnsafeMutableRawBufferPointer.allocate(
            byteCount: max(count, 2 * buffer.count, 256), alignment: 8)
        if kept > 0 { larger.copyMemory(from: UnsafeRawBufferPointer(rebasing: buffer[..<kept])) }
        buffer.deallocate()
        buffer = larger
    }

    /// Whether a key id is `bytes`.
    private static func same(_ id: [UInt8], _ bytes: UnsafeRawBufferPointer) -> Bool {
        id.count == bytes.count && id.withUnsafeBytes { memcmp($0.baseAddress!, bytes.baseAddress!, id.count) == 0 }
    }
}
