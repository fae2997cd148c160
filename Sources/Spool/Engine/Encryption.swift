import Foundation
import SpoolStorage

/// Encryption at rest: the personal values of each row sealed with
/// AES-256-GCM under a key the app provides.
///
/// Sealed: events' and dead letters' parameters and targets (a group's id,
/// an alias's previous user id), each identity's user id and traits, each
/// context. Readable: ids, names, types, times, positions
/// and the history's counts, so survey rules, the queue's bounds and
/// `sqlite3` keep working (docs/SCHEMA.md shows what an inspector sees).
/// Each value is sealed with a fresh 96-bit nonce, names its key's id, and
/// is bound to its row (an event's id, an identity's or a context's row
/// id): moved to another row, it does not open.
///
/// ```swift
/// configuration.encryption = .aesGCM(keyProvider: KeychainKeys())
/// ```
///
/// Listeners, uploads and ``EventEngine/requeueDeadLetters(_:)`` see
/// plaintext. Sealing happens on the writer's thread, never the caller's.
/// A value that will not open (its key lost, its bytes changed) is never
/// sent and never dropped: its event moves to the dead letters with reason
/// `undecryptable`, and ``SpoolDiagnostic/Kind/undecryptableRows`` is sent.
///
/// The key comes from the app (the Keychain, for example) and Spool never
/// stores it. To rotate, make the provider return a new current key and
/// call ``EventEngine/reencryptAll()``; values sealed with an older key
/// open as long as the provider returns that key.
///
/// A file that holds sealed values cannot be opened without encryption:
/// ``EventEngine/start()`` throws ``SpoolError/sealedRowsWithoutEncryption(path:)``.
public struct Encryption: Sendable {
    let provider: any EncryptionKeyProvider

    /// AES-256-GCM, with keys from `keyProvider` (CryptoKit on Apple
    /// platforms, the system's libcrypto on Linux).
    public static func aesGCM(keyProvider: some EncryptionKeyProvider) -> Encryption {
        Encryption(provider: keyProvider)
    }

    /// The sealer an engine's connections use.
    func makeSealer() -> RowSealer {
        let provider = provider
        return RowSealer(
            cipher: SystemSealingCipher(),
            currentKey: { try provider.currentKey().material },
            keyWithID: { try provider.key(withID: $0)?.material })
    }
}

/// Where the engine gets its encryption keys: from the app, which keeps
/// them (for example in the Keychain). Spool keeps the keys it was given
/// in memory only.
public protocol EncryptionKeyProvider: Sendable {
    /// The key new values are sealed with. Asked at ``EventEngine/start()``
    /// and at ``EventEngine/reencryptAll()``; a throw fails either.
    func currentKey() throws -> EncryptionKey

    /// The key with `id`, for values sealed with it; nil when the app no
    /// longer has it (those values then do not open). Asked once per key
    /// and engine while it returns the key.
    func key(withID id: String) throws -> EncryptionKey?
}

/// A 256-bit AES key and the id sealed values name it by.
public struct EncryptionKey: Sendable {
    /// The id stored beside each value sealed with this key (not secret).
    public let id: String
    let bytes: [UInt8]

    /// A key from 32 bytes, named by `id` (1 to 64 bytes of UTF-8).
    ///
    /// - Throws: ``SpoolError/invalidEncryptionKey(_:)`` for another
    ///   length or id.
    public init(id: String, bytes: some Collection<UInt8>) throws {
        guard bytes.count == 32 else {
            throw SpoolError.invalidEncryptionKey("an AES-256 key is 32 bytes, not \(bytes.count)")
        }
        guard (1...64).contains(id.utf8.count) else {
            throw SpoolError.invalidEncryptionKey("a key id is 1 to 64 bytes of UTF-8, not \(id.utf8.count)")
        }
        self.id = id
        self.bytes = Array(bytes)
    }

    var material: SealingKeyMaterial { SealingKeyMaterial(id: id, bytes: bytes) }
}

/// What ``EventEngine/reencryptAll()`` did.
public struct ReencryptionReport: Sendable, Hashable {
    /// The id of the key every value is now sealed with.
    public let keyID: String
    /// Values sealed again: events, dead letters, identities and contexts.
    public let resealed: Int
    /// Events whose values would not open, moved to the dead letters (and
    /// dead letters and identities left as they are).
    public let undecryptable: Int
}
