import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// A connection's sealing session (P10, P12): the sealed format byte for
/// byte, runs of values, keys read again, and sessions used at once.
struct SealingSessionTests {
    static let eventID = Array("0190f3a2-7c1e-7b44-9a55-6f1d2e3c4b5a".utf8)

    /// A sealer whose provider returns the keys named in `keys`, the
    /// current one first; each key is 32 bytes of its first byte.
    static func sealer(_ keys: Protected<[String]>) throws -> RowSealer {
        @Sendable func material(_ id: String) -> SealingKeyMaterial {
            SealingKeyMaterial(id: id, bytes: [UInt8](repeating: id.utf8.first!, count: 32))
        }
        let sealer = RowSealer(
            cipher: SystemSealingCipher(),
            currentKey: { material(keys.withLock { $0[0] }) },
            keyWithID: { id in keys.withLock { $0.contains(id) } ? material(id) : nil })
        try sealer.refreshCurrentKey()
        return sealer
    }

    /// `hex` as bytes.
    static func bytes(_ hex: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            bytes.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return bytes
    }

    /// `sealed` opened for the event `eventID`.
    static func open(_ sealed: [UInt8], _ session: SealingSession) -> [UInt8]? {
        sealed.withUnsafeBytes { sealed in eventID.withUnsafeBytes { session.open(sealed, for: .event($0)) } }
    }

    @Test(
        "P10: the sealed format stays put: values sealed by an earlier build open, and a new value is its header, its nonce, then AES-256-GCM of the plaintext bound to the header and the row"
    )
    func sealedFormat() throws {
        let key = [UInt8](repeating: 0x42, count: 32)
        let sealer = RowSealer(
            cipher: SystemSealingCipher(), currentKey: { SealingKeyMaterial(id: "bench", bytes: key) },
            keyWithID: { _ in nil })
        try sealer.refreshCurrentKey()
        let session = SealingSession(sealer: sealer)
        // Fixtures: sealed by an earlier build of Spool with this key, for
        // an event, the identities row 7 and the contexts row 9.
        let event = Self.bytes("010562656e6368ca35c139d57d5a2808a716a5cce12c4abdab339b4e343fd35593cd6159fe26785c0c17")
        let identity = Self.bytes(
            "010562656e6368009a79fe4a0b5bb5d15357e4ead61c6a7c7e1c925ff55e02c7598478a07eff298ae316c8dbf48c")
        let context = Self.bytes("010562656e63687b505c6b8385b701f901547e01b46aac781360c75ad0ec360a67521d128ac7509f67a6")
        #expect(Self.open(event, session) == Array(#"{"a":1}"#.utf8))
        #expect(identity.withUnsafeBytes { session.open($0, for: .identity(7)) } == [1, 0, 0, 0, 4] + "user{}".utf8)
        #expect(context.withUnsafeBytes { session.open($0, for: .context(9)) } == Array(#"{"c":2}"#.utf8))
        #expect(context.withUnsafeBytes { session.open($0, for: .context(8)) } == nil, "another row")

        // A new value, taken apart: format 1, the key id's length and id,
        // the nonce, then what the cipher alone makes of the plaintext with
        // the associated data spelled out here.
        let plaintext = Array(#"{"b":2}"#.utf8)
        session.startRun()
        let range = try plaintext.withUnsafeBytes { plain in
            try Self.eventID.withUnsafeBytes { try session.sealInRun(plain, for: .event($0)) }
        }
        let sealed = Array(session.sealedInRun(range))
        #expect(Array(sealed.prefix(7)) == [1, 5] + "bench".utf8)
        #expect(sealed.count == 7 + 12 + plaintext.count + 16)
        let nonce = Array(sealed[7..<19])
        let associatedData = [1, 5] + "bench".utf8 + "e".utf8 + Self.eventID
        var expected = [UInt8](repeating: 0, count: plaintext.count + 16)
        let cipher = try SystemSealingCipher().prepare(key)
        try nonce.withUnsafeBytes { nonce in
            try plaintext.withUnsafeBytes { plain in
                try associatedData.withUnsafeBytes { data in
                    try expected.withUnsafeMutableBytes {
                        try cipher.seal(nonce: nonce, plaintext: plain, associatedData: data, into: $0)
                    }
                }
            }
        }
        #expect(Array(sealed[19...]) == expected)
        #expect(Self.open(sealed, session) == plaintext)
    }

    @Test("P10: a run keeps each value where it was sealed, each with a nonce of its own, and each opens")
    func runs() throws {
        let session = SealingSession(sealer: try Self.sealer(Protected(["k"])))
        session.startRun()
        var ranges: [Range<Int>] = []
        for index in 0..<300 {
            // Longer and longer values: the run's buffer grows meanwhile.
            let plaintext = Array("{\"i\":\"\(String(repeating: "x", count: index))\"}".utf8)
            ranges.append(
                try plaintext.withUnsafeBytes { plain in
                    try Self.eventID.withUnsafeBytes { try session.sealInRun(plain, for: .event($0)) }
                })
        }
        var nonces = Set<[UInt8]>()
        session.takeKeys()
        for (index, range) in ranges.enumerated() {
            let sealed = session.sealedInRun(range)
            nonces.insert(Array(sealed[3..<15]))
            var opened = [UInt8](repeating: 0, count: RowSealer.plaintextCount(of: sealed))
            let count = Self.eventID.withUnsafeBytes { id in
                opened.withUnsafeMutableBytes { session.openInRun(sealed, for: .event(id), into: $0) }
            }
            #expect(count == opened.count)
            #expect(opened == Array("{\"i\":\"\(String(repeating: "x", count: index))\"}".utf8))
        }
        #expect(nonces.count == ranges.count)
    }

    @Test(
        "P12: once the current key is read again, the next run seals with it, and a key the provider no longer returns stops opening values, though the session had it prepared"
    )
    func keysReadAgain() throws {
        let keys = Protected(["a", "b"])
        let sealer = try Self.sealer(keys)
        let session = SealingSession(sealer: sealer)
        func sealRun() throws -> [UInt8] {
            session.startRun()
            let range = try [UInt8](#"{"k":1}"#.utf8).withUnsafeBytes { plain in
                try Self.eventID.withUnsafeBytes { try session.sealInRun(plain, for: .event($0)) }
            }
            return Array(session.sealedInRun(range))
        }
        let sealedWithA = try sealRun()
        #expect(sealedWithA.withUnsafeBytes(RowSealer.keyID(of:)) == "a")

        keys.withLock { $0 = ["b"] }
        #expect(try sealer.refreshCurrentKey() == "b")
        let sealedWithB = try sealRun()
        #expect(sealedWithB.withUnsafeBytes(RowSealer.keyID(of:)) == "b")
        #expect(Self.open(sealedWithB, session) == Array(#"{"k":1}"#.utf8))
        #expect(Self.open(sealedWithA, session) == nil, "the provider no longer returns a")
        keys.withLock { $0 = ["b", "a"] }
        #expect(Self.open(sealedWithA, session) == Array(#"{"k":1}"#.utf8), "a is asked for again")
    }

    @Test(
        "P12: a sealer follows a key noted elsewhere by asking its provider once per key, then once a minute while it still gives the key in use, also when the clock goes back"
    )
    func followingANotedKey() throws {
        let current = Protected("a")
        let asked = Protected(0)
        let sealer = RowSealer(
            cipher: SystemSealingCipher(),
            currentKey: {
                asked.withLock { $0 += 1 }
                return SealingKeyMaterial(id: current.withLock { $0 }, bytes: [UInt8](repeating: 7, count: 32))
            },
            keyWithID: { _ in nil })
        try sealer.refreshCurrentKey()
        let problems = Protected<[String]>([])
        sealer.onKeyNotFollowed { problem in problems.withLock { $0.append(problem) } }
        sealer.follow("a", now: 1_000)
        #expect(asked.withLock { $0 } == 1, "the key in use: not asked")
        sealer.follow("b", now: 1_000)  // the provider still gives a
        sealer.follow("b", now: 1_030)
        #expect(asked.withLock { $0 } == 2 && problems.withLock { $0.count } == 1)
        sealer.follow("b", now: 1_061)
        #expect(asked.withLock { $0 } == 3, "a minute later")
        sealer.follow("b", now: 500)
        #expect(asked.withLock { $0 } == 4, "the clock went back")
        current.withLock { $0 = "b" }
        sealer.follow("b", now: 510)
        #expect(asked.withLock { $0 } == 4 && sealer.currentKeyID == "a", "within the minute")
        sealer.follow("b", now: 571)
        #expect(asked.withLock { $0 } == 5 && sealer.currentKeyID == "b", "followed a minute later")
        // A provider ahead of the note (the app updated the key, and has not
        // called reencryptAll yet): its key is taken, and not asked again.
        current.withLock { $0 = "d" }
        sealer.follow("c", now: 600)
        #expect(asked.withLock { $0 } == 6 && sealer.currentKeyID == "d")
        sealer.follow("c", now: 700)
        #expect(asked.withLock { $0 } == 6, "not asked again for that note")
        #expect(problems.withLock { $0.count } == 3, "each answer that still gave the key in use")
    }

    @Test("P10: two sessions on one sealer seal and open at once on two threads; every value opens in a third")
    func sessionsAtOnce() async throws {
        let sealer = try Self.sealer(Protected(["k"]))
        let sealed = try await withThrowingTaskGroup(of: [[UInt8]].self) { group in
            for worker in 0..<2 {
                group.addTask {
                    let session = SealingSession(sealer: sealer)
                    var values: [[UInt8]] = []
                    for index in 0..<2_000 {
                        if index % 64 == 0 { session.startRun() }
                        let plaintext = Array("{\"w\":\(worker),\"i\":\(index)}".utf8)
                        let range = try plaintext.withUnsafeBytes { plain in
                            try Self.eventID.withUnsafeBytes { try session.sealInRun(plain, for: .event($0)) }
                        }
                        let value = Array(session.sealedInRun(range))
                        #expect(Self.open(value, session) == plaintext)
                        values.append(value)
                    }
                    return values
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let session = SealingSession(sealer: sealer)
        let opened = sealed.joined().filter { Self.open($0, session) != nil }.count
        #expect(opened == 4_000)
    }
}
