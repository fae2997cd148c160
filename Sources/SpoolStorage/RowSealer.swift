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
///
/// A class, and not Sendable: a prepared key may hold cipher state that is
/// not safe to share between threads. Each ``SealingSession`` prepares its
/// own.
package protocol PreparedSealingKey: AnyObject {
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
    /// Prepares a 32-byte key for use by one owner.
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

/// The keys the personal values of rows are sealed and opened with (see
/// the `sealed` columns in docs/SCHEMA.md), shared by an engine's
/// connections; each seals and opens through a ``SealingSession`` of its
/// own.
///
/// New values are sealed with the current key, read from the app's
/// provider by ``refreshCurrentKey()``. A value opens with the key its
/// header names, asked of the provider once and then kept in memory (keys
/// are never written anywhere).
package final class RowSealer: Sendable {
    package static let formatVersion: UInt8 = 1
    package static let nonceBytes = 12
    package static let tagBytes = 16

    /// A key the provider returned, checked: its id's UTF-8 and its bytes.
    final class Key: Sendable {
        let id: [UInt8]
        let bytes: [UInt8]

        init(id: [UInt8], bytes: [UInt8]) {
            self.id = id
            self.bytes = bytes
        }
    }

    private struct State {
        var current: Key?
        /// Keys the provider returned since the current key was read, by id.
        var known: [[UInt8]: Key] = [:]
        /// Counts the reads of the current key: a session drops the keys
        /// it prepared when it changes.
        var generation = 0
        /// The key another process noted that ``follow(_:now:)`` last asked
        /// the provider for, when, and whether the provider gave a key other
        /// than the one in use then (not asked again for that note).
        var followed: (id: String, at: Double, settled: Bool)?
    }

    let cipher: any SealingCipher
    private let currentKey: @Sendable () throws -> SealingKeyMaterial
    private let keyWithID: @Sendable (String) throws -> SealingKeyMaterial?
    private let state = Protected(State())
    private let notFollowed = Protected<(@Sendable (String) -> Void)?>(nil)

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
        let key = try check(material)
        state.withLock { state in
            state.current = key
            state.known = [key.id: key]
            state.generation += 1
        }
        return material.id
    }

    /// When another process made `noted` the current key
    /// (``Connection/noteCurrentKey(_:)``) and this sealer seals with
    /// another, asks the provider for the current key again: once for each
    /// key noted, then at most once a minute while the provider still gives
    /// the key in use, or fails (each time telling the handler of
    /// ``onKeyNotFollowed(_:)``). A provider that gives another key (the one
    /// noted, or one it moved to since) is followed and not asked again for
    /// that note.
    package func follow(_ noted: String?, now: Double) {
        guard let noted, noted != currentKeyID else { return }
        let ask = state.withLock { state in
            if let followed = state.followed, followed.id == noted {
                // A clock set back counts as a minute gone.
                guard !followed.settled, now - followed.at >= 60 || now < followed.at else { return false }
            }
            state.followed = (noted, now, false)
            return true
        }
        guard ask else { return }
        let before = currentKeyID
        let problem: String
        do {
            let id = try refreshCurrentKey()
            guard id == before else {
                state.withLock { $0.followed?.settled = true }
                return
            }
            problem = "the key provider still gives key \(id) as current"
        } catch {
            problem = "the key provider failed: \(error)"
        }
        // Meanwhile values are sealed with the key in use.
        notFollowed.withLock { $0 }?(
            "another process made key \(noted) current (reencryptAll), but \(problem); "
                + "values are sealed with key \(currentKeyID ?? "none") until the provider gives \(noted) "
                + "(asked again in a minute)")
    }

    /// Called with what happened each time ``follow(_:now:)`` asked the
    /// provider for the key another process made current and did not get it.
    package func onKeyNotFollowed(_ handler: @escaping @Sendable (String) -> Void) {
        notFollowed.withLock { $0 = handler }
    }

    /// The id of the key new values are sealed with.
    package var currentKeyID: String? {
        state.withLock { $0.current.map { String(decoding: $0.id, as: UTF8.self) } }
    }


    /// `material` as a key, once its id and length are checked and the
    /// cipher took it.
    private func check(_ material: SealingKeyMaterial) throws -> Key {
        let id = Array(material.id.utf8)
        guard (1...64).contains(id.count) else {
            throw SealingError.keyUnavailable("a key id is 1 to 64 bytes of UTF-8, not \(id.count)")
        }
        guard material.bytes.count == 32 else {
            throw SealingError.keyUnavailable("an AES-256 key is 32 bytes, not \(material.bytes.count)")
        }
        _ = try prepare(material.bytes)
        return Key(id: id, bytes: material.bytes)
    }

    /// `bytes` prepared by the cipher for one owner.
    func prepare(_ bytes: [UInt8]) throws -> any PreparedSealingKey {
        do {
            return try cipher.prepare(bytes)
        } catch {
            throw SealingError.cipherFailed(String(describing: error))
        }
    }

    // MARK: - What sessions ask

    /// The count of current key reads: unchanged, the keys a session
    /// prepared are the ones it may use.
    var generation: Int {
        state.withLock { $0.generation }
    }

    /// The key new values are sealed with, and the generation it belongs to.
    func current() throws -> (key: Key, generation: Int) {
        try state.withLock { state in
            guard let current = state.current else {
                throw SealingError.keyUnavailable("no current key: the engine has not read one")
            }
            return (current, state.generation)
        }
    }

    /// The key with `id`: asked of the provider the first time it opens a
    /// value. Only keys the provider returned are kept; one it lacks, or
    /// could not give, is asked for again with the next value.
    func key(id: UnsafeRawBufferPointer) -> (key: Key, generation: Int)? {
        let known = state.withLock { state -> (Key, Int)? in
            if let current = state.current, current.id.elementsEqual(id) { return (current, state.generation) }
            return state.known[Array(id)].map { ($0, state.generation) }
        }
        if let known { return known }
        do {
            // A provider that throws or has no such key leaves the value
            // closed: its row is set aside and reported, never sent.
            guard let material = try keyWithID(String(decoding: id, as: UTF8.self)),
                material.id.utf8.elementsEqual(id)
            else { return nil }
            let key = try check(material)
            return state.withLock { state in
                state.known[key.id] = key
                return (key, state.generation)
            }
        } catch {
            return nil
        }
    }

    /// How many bytes `sealed` opens to (0 for a malformed value).
    package static func plaintextCount(of sealed: UnsafeRawBufferPointer) -> Int {
        guard sealed.count >= 2 else { return 0 }
        return max(0, sealed.count - 2 - Int(sealed[1]) - nonceBytes - tagBytes)
    }

    /// The id of the key `sealed` was sealed with, if its header is whole.
    package static func keyID(of sealed: UnsafeRawBufferPointer) -> String? {
        guard sealed.count >= 2, sealed[0] == formatVersion, sealed.count >= 2 + Int(sealed[1]) else { return nil }
        return String(decoding: sealed[2..<(2 + Int(sealed[1]))], as: UTF8.self)
    }
}
