import Foundation
import SpoolStorage

#if canImport(CryptoKit)
    import CryptoKit
    import Security
#elseif canImport(CCrypto)
    import CCrypto
#endif

/// AES-256-GCM and a secure random source from the platform: CryptoKit on
/// Apple platforms, the system's libcrypto elsewhere. Calls only: what is
/// sealed, with which nonce and associated data, is ``RowSealer``'s.
struct SystemSealingCipher: SealingCipher {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    func prepare(_ key: [UInt8]) throws -> any PreparedSealingKey {
        #if canImport(CryptoKit)
            return CryptoKitKey(key: SymmetricKey(data: key))
        #elseif canImport(CCrypto)
            return try LibcryptoKey(key)
        #else
            throw Failure(description: "no AES-GCM on this platform")
        #endif
    }

    func fillRandom(_ buffer: UnsafeMutableRawBufferPointer) throws {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return }
        #if canImport(CryptoKit)
            guard SecRandomCopyBytes(kSecRandomDefault, buffer.count, base) == errSecSuccess else {
                throw Failure(description: "SecRandomCopyBytes failed")
            }
        #elseif canImport(CCrypto)
            guard RAND_bytes(base.assumingMemoryBound(to: UInt8.self), Int32(buffer.count)) == 1 else {
                throw Failure(description: "RAND_bytes failed")
            }
        #else
            throw Failure(description: "no secure random source on this platform")
        #endif
    }
}

#if canImport(CryptoKit)
    private final class CryptoKitKey: PreparedSealingKey {
        let key: SymmetricKey

        init(key: SymmetricKey) {
            self.key = key
        }

        func seal(
            nonce: UnsafeRawBufferPointer, plaintext: UnsafeRawBufferPointer,
            associatedData: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer
        ) throws {
            let box = try AES.GCM.seal(
                Data(plaintext), using: key, nonce: try AES.GCM.Nonce(data: Data(nonce)),
                authenticating: Data(associatedData))
            output.copyBytes(from: box.ciphertext + box.tag)
        }

        func open(
            nonce: UnsafeRawBufferPointer, ciphertext: UnsafeRawBufferPointer, tag: UnsafeRawBufferPointer,
            associatedData: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer
        ) -> Bool {
            do {
                let box = try AES.GCM.SealedBox(
                    nonce: try AES.GCM.Nonce(data: Data(nonce)), ciphertext: Data(ciphertext), tag: Data(tag))
                output.copyBytes(from: try AES.GCM.open(box, using: key, authenticating: Data(associatedData)))
                return true
            } catch {
                return false
            }
        }
    }
#elseif canImport(CCrypto)
    /// One key's cipher contexts, the key schedule computed once: a new
    /// nonce re-initialises a context without the key. One owner's (see
    /// ``PreparedSealingKey``): a context is not safe to share between
    /// threads.
    private final class LibcryptoKey: PreparedSealingKey {
        private let sealing: OpaquePointer
        private let opening: OpaquePointer
        /// The tag as a parameter of either context (its bytes pointed at
        /// for each value), and the parameter's name: a cheaper way to the
        /// tag than `EVP_CIPHER_CTX_ctrl`.
        private let tagParameter = UnsafeMutablePointer<OSSL_PARAM>.allocate(capacity: 2)
        private let tagName = strdup(OSSL_CIPHER_PARAM_AEAD_TAG)

        init(_ key: [UInt8]) throws {
            guard let sealing = EVP_CIPHER_CTX_new(), let opening = EVP_CIPHER_CTX_new() else {
                throw SystemSealingCipher.Failure(description: "EVP_CIPHER_CTX_new failed")
            }
            self.sealing = sealing
            self.opening = opening
            tagParameter[0] = OSSL_PARAM_construct_octet_string(tagName, nil, RowSealer.tagBytes)
            tagParameter[1] = OSSL_PARAM_construct_end()
            guard EVP_EncryptInit_ex(sealing, EVP_aes_256_gcm(), nil, key, nil) == 1,
                EVP_DecryptInit_ex(opening, EVP_aes_256_gcm(), nil, key, nil) == 1
            else { throw SystemSealingCipher.Failure(description: "EVP_aes_256_gcm init failed") }
        }

        deinit {
            EVP_CIPHER_CTX_free(sealing)
            EVP_CIPHER_CTX_free(opening)
            tagParameter.deallocate()
            free(tagName)
        }

        func seal(
            nonce: UnsafeRawBufferPointer, plaintext: UnsafeRawBufferPointer,
            associatedData: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer
        ) throws {
            let out = output.baseAddress!.assumingMemoryBound(to: UInt8.self)
            var written: Int32 = 0
            tagParameter[0].data = UnsafeMutableRawPointer(out + plaintext.count)
            let sealed =
                EVP_EncryptInit_ex(sealing, nil, nil, nil, nonce.bound) == 1
                && EVP_EncryptUpdate(sealing, nil, &written, associatedData.bound, associatedData.int32Count) == 1
                && EVP_EncryptUpdate(sealing, out, &written, plaintext.bound, plaintext.int32Count) == 1
                && EVP_EncryptFinal_ex(sealing, out + Int(written), &written) == 1
                && EVP_CIPHER_CTX_get_params(sealing, tagParameter) == 1
            guard sealed else { throw SystemSealingCipher.Failure(description: "AES-GCM sealing failed") }
        }

        func open(
            nonce: UnsafeRawBufferPointer, ciphertext: UnsafeRawBufferPointer, tag: UnsafeRawBufferPointer,
            associatedData: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer
        ) -> Bool {
            // GCM writes no final block: a byte of room past the plaintext
            // is never touched, so the end of `output` suffices.
            var final: UInt8 = 0
            let out = output.baseAddress?.assumingMemoryBound(to: UInt8.self)
            var written: Int32 = 0
            tagParameter[0].data = UnsafeMutableRawPointer(mutating: tag.baseAddress)
            return EVP_DecryptInit_ex(opening, nil, nil, nil, nonce.bound) == 1
                && EVP_DecryptUpdate(opening, nil, &written, associatedData.bound, associatedData.int32Count) == 1
                && EVP_DecryptUpdate(opening, out, &written, ciphertext.bound, ciphertext.int32Count) == 1
                && EVP_CIPHER_CTX_set_params(opening, tagParameter) == 1
                && EVP_DecryptFinal_ex(opening, &final, &written) > 0
        }
    }

    extension UnsafeRawBufferPointer {
        /// The bytes as libcrypto takes them (nil when empty, which
        /// libcrypto does not read).
        fileprivate var bound: UnsafePointer<UInt8>? { baseAddress?.assumingMemoryBound(to: UInt8.self) }

        fileprivate var int32Count: Int32 { Int32(count) }
    }
#endif
