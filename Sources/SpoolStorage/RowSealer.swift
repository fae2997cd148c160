import Foundation

/// A key's bytes as the app's key provider returned them, under its id.
package struct SealingKeyMaterial: Sendable {
    package let id: String
    package let bytes: [UInt8]

    package init(id: String, bytes: [UInt8]) {
        self.id = id
        self.bytes = bytes
    }
}

/// AES-256-GCM with one key, from the platform (CryptoKit, or the system's
/// libcrypto). The sealer decides what is sealed, with which nonce and
/// which associated data; a prepared key only runs the cipher.
package protocol PreparedSealingKey: Sendable {
    /// Writes `plaintext`'s ciphertext and then its 16-byte tag to `output`,
    /// which holds exactly `plaintext.count + 16` bytes.
    func seal(
        nonce: UnsafeRawBufferPointer, plaintext: UnsafeRawBufferPointer, associatedData: UnsafeRawBufferPointer,
        into output: UnsafeMutableRawBufferPointer) throws
    /// Writes the plaintext to `output`, which holds exactly
    /// `ciphertext.count` bytes, and returns true when the tag proves
    /// `ciphertext` and `associatedData` unchanged; false otherwise.
    func open(
        nonce: UnsafeRawBufferPointer, ciphertext: UnsafeRawBufferPointer, tag: UnsafeRawBufferPointer,
        associatedData: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer
    ) -> Bool
}

/// The platform's cipher and random source.
package protocol SealingCipher: Sendable {
    /// Prepares a 32-byte key for use.
    func prepare(_ key: [UInt8]) throws -> any PreparedSealingKey
    /// Fills `buffer` with cryptographically secure random bytes.
    func fillRandom(_ buffer: UnsafeMutableRawBufferPointer) throws
}

/// The row a sealed value belongs to, bound to it as associated data.
package enum SealedRow {
    /// An event, by its id: the same in `events` and `dead_letters`, and
    /// across a salvage.
    case event(UnsafeRawBufferPointer)
    /// An `identities` row, by its row id.
    case identity(Int64)
    /// A `contexts` row, by its row id.
    case context(Int64)
}

/// Why a sealing operation failed.
package enum SealingError: Error, Sendable, Equatable {
    /// The key provider threw, or returned something that is not a key.
    case keyUnavailable(String)
    /// The cipher or the random source failed.
    case cipherFailed(String)
}

/// Seals and opens the personal values of rows (see the `sealed` columns
/// in docs/SCHEMA.md).
///
/// New values are sealed with the current key, read from the app's
/// provider by ``refreshCurrentKey()``. A value opens with the key its
/// header names, asked of the provider once and then kept in memory (keys
/// are never written anywhere).
package final class RowSealer: Sendable {
    package static let formatVersion: UInt8 = 1
    package static let nonceBytes = 12
    package static let tagBytes = 16

    private final class Key: Sendable {
        let id: [UInt8]
        let prepared: any PreparedSealingKey

        init(id: [UInt8], prepared: any PreparedSealingKey) {
            self.id = id
            self.prepared = prepared
        }
    }

    private struct State {
        var current: Key?
        /// Keys the provider returned since the current key was read, by id.
        var known: [[UInt8]: Key] = [:]
        /// Random bytes for nonces, taken 12 at a time.
        var random: [UInt8] = []
        var randomOffset = 0
    }

    private let cipher: any SealingCipher
    private let currentKey: @Sendable () throws -> SealingKeyMaterial
    private let keyWithID: @Sendable (String) throws -> SealingKeyMaterial?
    private let state = Protected(State())
    private let undecryptable = Protected<(@Sendable (Int) -> Void)?>(nil)

    package init(
        cipher: any SealingCipher, currentKey: @escaping @Sendable () throws -> SealingKeyMaterial,
        keyWithID: @escaping @Sendable (String) throws -> SealingKeyMaterial?
    ) {
        self.cipher = cipher
        self.currentKey = currentKey
        self.keyWithID = keyWithID
    }

    /// Asks the provider for the current key; new values are sealed with it
    /// from now on. Other keys are asked for again as values need them, so
    /// a key the provider does not return stops opening values.
    ///
    /// - Returns: its id.
    @discardableResult
    package func refreshCurrentKey() throws -> String {
        let material: SealingKeyMaterial
        do {
            material = try currentKey()
        } catch {
            throw SealingError.keyUnavailable(String(describing: error))
        }
        let key = try prepare(material)
        state.withLock { state in
            state.current = key
            state.known = [key.id: key]
        }
        return material.id
    }

    /// The id of the key new values are sealed with.
    package var currentKeyID: String? {
        state.withLock { $0.current.map { String(decoding: $0.id, as: UTF8.self) } }
    }

    /// Called with a count each time rows that will not open are set aside.
    package func onUndecryptable(_ handler: @escaping @Sendable (Int) -> Void) {
        undecryptable.withLock { $0 = handler }
    }

    /// Tells the handler that `count` rows would not open.
    package func reportUndecryptable(_ count: Int) {
        guard count > 0, let handler = undecryptable.withLock({ $0 }) else { return }
        handler(count)
    }

    private func prepare(_ material: SealingKeyMaterial) throws -> Key {
        let id = Array(material.id.utf8)
        guard (1...64).contains(id.count) else {
            throw SealingError.keyUnavailable("a key id is 1 to 64 bytes of UTF-8, not \(id.count)")
        }
        guard material.bytes.count == 32 else {
            throw SealingError.keyUnavailable("an AES-256 key is 32 bytes, not \(material.bytes.count)")
        }
        do {
            return Key(id: id, prepared: try cipher.prepare(material.bytes))
        } catch {
            throw SealingError.cipherFailed(String(describing: error))
        }
    }

    /// Seals `plaintext` for `row` with the current key and a fresh nonce.
    package func seal(_ plaintext: UnsafeRawBufferPointer, for row: SealedRow) throws -> [UInt8] {
        var nonce = (UInt64(0), UInt32(0))
        let key: Key = try state.withLock { state in
            guard let current = state.current else {
                throw SealingError.keyUnavailable("no current key: the engine has not read one")
            }
            if state.randomOffset + Self.nonceBytes > state.random.count {
                state.random = [UInt8](repeating: 0, count: Self.nonceBytes * 256)
                try state.random.withUnsafeMutableBytes { try cipher.fillRandom($0) }
                state.randomOffset = 0
            }
            withUnsafeMutableBytes(of: &nonce) { nonce in
                state.random.withUnsafeBytes { random in
                    nonce.copyMemory(
                        from: UnsafeRawBufferPointer(rebasing: random[state.randomOffset..<state.randomOffset + 12]))
                }
            }
            state.randomOffset += Self.nonceBytes
            return current
        }
        let header = 2 + key.id.count
        let count = header + Self.nonceBytes + plaintext.count + Self.tagBytes
        return try [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            let output = UnsafeMutableRawBufferPointer(buffer)
            output[0] = Self.formatVersion
            output[1] = UInt8(key.id.count)
            key.id.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: output[2..<header]).copyMemory(from: $0) }
            let nonceEnd = header + Self.nonceBytes
            withUnsafeBytes(of: &nonce) {
                UnsafeMutableRawBufferPointer(rebasing: output[header..<nonceEnd]).copyMemory(
                    from: UnsafeRawBufferPointer(rebasing: $0.prefix(Self.nonceBytes)))
            }
            try Self.withAssociatedData(keyID: UnsafeRawBufferPointer(rebasing: output[2..<header]), row: row) {
                try key.prepared.seal(
                    nonce: UnsafeRawBufferPointer(rebasing: output[header..<nonceEnd]), plaintext: plaintext,
                    associatedData: $0, into: UnsafeMutableRawBufferPointer(rebasing: output[nonceEnd...]))
            }
            initialized = count
        }
    }

    /// The plaintext of `sealed`, or nil when it will not open: its key is
    /// not available, or its bytes, its header or its row changed.
    package func open(_ sealed: UnsafeRawBufferPointer, for row: SealedRow) -> [UInt8]? {
        let count = Self.plaintextCount(of: sealed)
        var opened = false
        let plaintext = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            opened = open(sealed, for: row, into: UnsafeMutableRawBufferPointer(buffer)) != nil
            initialized = opened ? count : 0
        }
        return opened ? plaintext : nil
    }

    /// How many bytes `sealed` opens to (0 for a malformed value).
    package static func plaintextCount(of sealed: UnsafeRawBufferPointer) -> Int {
        guard sealed.count >= 2 else { return 0 }
        return max(0, sealed.count - 2 - Int(sealed[1]) - nonceBytes - tagBytes)
    }

    /// Writes the plaintext of `sealed` to the start of `output` (at least
    /// ``plaintextCount(of:)`` bytes) and returns its length; nil when it
    /// will not open.
    package func open(_ sealed: UnsafeRawBufferPointer, for row: SealedRow, into output: UnsafeMutableRawBufferPointer)
        -> Int?
    {
        guard sealed.count >= 2, sealed[0] == Self.formatVersion else { return nil }
        let idEnd = 2 + Int(sealed[1])
        let nonceEnd = idEnd + Self.nonceBytes
        guard sealed[1] > 0, sealed.count >= nonceEnd + Self.tagBytes else { return nil }
        let id = UnsafeRawBufferPointer(rebasing: sealed[2..<idEnd])
        let ciphertext = UnsafeRawBufferPointer(rebasing: sealed[nonceEnd..<(sealed.count - Self.tagBytes)])
        guard output.count >= ciphertext.count, let key = key(id: id) else { return nil }
        let opened = Self.withAssociatedData(keyID: id, row: row) { associatedData in
            key.prepared.open(
                nonce: UnsafeRawBufferPointer(rebasing: sealed[idEnd..<nonceEnd]), ciphertext: ciphertext,
                tag: UnsafeRawBufferPointer(rebasing: sealed[(sealed.count - Self.tagBytes)...]),
                associatedData: associatedData,
                into: UnsafeMutableRawBufferPointer(rebasing: output[..<ciphertext.count]))
        }
        return opened ? ciphertext.count : nil
    }

    /// The id of the key `sealed` was sealed with, if its header is whole.
    package static func keyID(of sealed: UnsafeRawBufferPointer) -> String? {
        guard sealed.count >= 2, sealed[0] == formatVersion, sealed.count >= 2 + Int(sealed[1]) else { return nil }
        return String(decoding: sealed[2..<(2 + Int(sealed[1]))], as: UTF8.self)
    }

    /// The key with `id`: asked of the provider the first time it opens a
    /// value. Only keys the provider returned are kept; one it lacks, or
    /// could not give, is asked for again with the next value.
    private func key(id: UnsafeRawBufferPointer) -> Key? {
        let known = state.withLock { state -> Key? in
            if let current = state.current, current.id.elementsEqual(id) { return current }
            return state.known[Array(id)]
        }
        if let known { return known }
        do {
            // A provider that throws or has no such key leaves the value
            // closed: its row is set aside and reported, never sent.
            guard let material = try keyWithID(String(decoding: id, as: UTF8.self)),
                material.id.utf8.elementsEqual(id)
            else { return nil }
            let key = try prepare(material)
            state.withLock { $0.known[key.id] = key }
            return key
        } catch {
            return nil
        }
    }

    /// The associated data bound to a value: its header (format and key
    /// id) and its row, which also names the row's table; on the stack.
    private static func withAssociatedData<T>(
        keyID: UnsafeRawBufferPointer, row: SealedRow, _ body: (UnsafeRawBufferPointer) throws -> T
    ) rethrows -> T {
        let rowBytes: Int
        switch row {
        case .event(let id): rowBytes = id.count
        case .identity, .context: rowBytes = 8
        }
        return try withUnsafeTemporaryAllocation(byteCount: 3 + keyID.count + rowBytes, alignment: 1) { data in
            data[0] = formatVersion
            data[1] = UInt8(keyID.count)
            UnsafeMutableRawBufferPointer(rebasing: data[2..<(2 + keyID.count)]).copyMemory(from: keyID)
            let rest = UnsafeMutableRawBufferPointer(rebasing: data[(3 + keyID.count)...])
            switch row {
            case .event(let id):
                data[2 + keyID.count] = UInt8(ascii: "e")
                rest.copyMemory(from: id)
            case .identity(let id):
                data[2 + keyID.count] = UInt8(ascii: "i")
                withUnsafeBytes(of: id.bigEndian) { rest.copyMemory(from: $0) }
            case .context(let id):
                data[2 + keyID.count] = UInt8(ascii: "c")
                withUnsafeBytes(of: id.bigEndian) { rest.copyMemory(from: $0) }
            }
            return try body(UnsafeRawBufferPointer(data))
        }
    }
}
