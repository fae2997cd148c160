import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Keys a test hands the engine: which one is current, and which the app
/// still has, can change while it runs.
final class TestKeys: EncryptionKeyProvider {
    private let state: Protected<(current: String, available: [String: EncryptionKey])>

    /// Keys named `ids`, each 32 bytes of a value of its own; the first current.
    init(_ ids: String...) throws {
        var available: [String: EncryptionKey] = [:]
        for id in ids { available[id] = try Self.key(id) }
        state = Protected((ids[0], available))
    }

    static func key(_ id: String) throws -> EncryptionKey {
        try EncryptionKey(id: id, bytes: [UInt8](repeating: id.utf8.reduce(1, &+), count: 32))
    }

    func currentKey() throws -> EncryptionKey {
        try state.withLock { state in try #require(state.available[state.current]) }
    }

    func key(withID id: String) throws -> EncryptionKey? { state.withLock { $0.available[id] } }

    /// Makes `id` current (a new key, or one the provider already has).
    func makeCurrent(_ id: String) throws {
        let key = try Self.key(id)
        state.withLock { state in
            state.current = id
            if state.available[id] == nil { state.available[id] = key }
        }
    }

    /// Makes the app lose the key `id`.
    func forget(_ id: String) { state.withLock { _ = $0.available.removeValue(forKey: id) } }
}

/// Encryption at rest (P10–P13): what is sealed, what stays readable, what
/// the collector and listeners receive, and keys that change.
@Suite(.needsChildProcesses)
struct EncryptionTests {
    /// `bytes` as lower-case hex.
    static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

    /// Every occurrence of `marker` in the database, its -wal and -shm.
    static func found(_ marker: String, _ database: URL) -> Int {
        PrivacyTests.occurrences(of: marker, besides: database).values.reduce(0, +)
    }

    /// The ids of the keys the stored values of `table` are sealed with.
    static func keyIDs(_ engine: EventEngine, _ table: String) async throws -> [String] {
        let sql: String =
            switch table {
            case "events": "SELECT sealed FROM events WHERE sealed IS NOT NULL"
            case "identities": "SELECT sealed FROM identities WHERE sealed IS NOT NULL"
            case "dead_letters": "SELECT sealed FROM dead_letters WHERE sealed IS NOT NULL"
            default: "SELECT sealed FROM contexts WHERE sealed IS NOT NULL"
            }
        return try await engine.query { connection in
            try connection.withStatement(sql) { statement in
                var ids: [String] = []
                while try statement.step() { ids.append(statement.blob(at: 0).flatMap(RowSealer.keyID(of:)) ?? "?") }
                return ids
            }
        }
    }

    @Test("P10: the platform's AES-256-GCM gives the published answers, and opens only what it sealed")
    func knownAnswers() throws {
        let key = try SystemSealingCipher().prepare([UInt8](repeating: 0, count: 32))
        let nonce = [UInt8](repeating: 0, count: 12)
        func seal(_ plain: [UInt8]) throws -> [UInt8] {
            var output = [UInt8](repeating: 0, count: plain.count + 16)
            try nonce.withUnsafeBytes { nonce in
                try plain.withUnsafeBytes { plain in
                    try [UInt8]().withUnsafeBytes { none in
                        try output.withUnsafeMutableBytes { output in
                            try key.seal(nonce: nonce, plaintext: plain, associatedData: none, into: output)
                        }
                    }
                }
            }
            return output
        }
        func open(_ sealed: [UInt8], associatedData: [UInt8] = []) -> [UInt8]? {
            var output = [UInt8](repeating: 0, count: sealed.count - 16)
            let opened = nonce.withUnsafeBytes { nonce in
                sealed.withUnsafeBytes { sealed in
                    associatedData.withUnsafeBytes { data in
                        output.withUnsafeMutableBytes { output in
                            key.open(
                                nonce: nonce, ciphertext: UnsafeRawBufferPointer(rebasing: sealed.dropLast(16)),
                                tag: UnsafeRawBufferPointer(rebasing: sealed.suffix(16)), associatedData: data,
                                into: output)
                        }
                    }
                }
            }
            return opened ? output : nil
        }
        // The GCM specification's test cases 13 and 14 (AES-256, zero key and IV).
        #expect(Self.hex(try seal([])) == "530f8afbc74536b9a963b4f1c4cb738b")
        let sealed = try seal([UInt8](repeating: 0, count: 16))
        #expect(Self.hex(sealed) == "cea7403d4d606b6e074ec5d3baf39d18" + "d0d1c8a799996bf0265b98b5d48ab919")
        #expect(open(sealed) == [UInt8](repeating: 0, count: 16))
        var flipped = sealed
        flipped[3] ^= 1
        #expect(open(flipped) == nil, "a changed byte")
        #expect(open(sealed, associatedData: [1]) == nil, "other associated data")
    }

    @Test(
        "P10: with encryption, a marker in parameters, targets, user id, traits and context is in no byte of the db, -wal or -shm, while listeners and the collector get it; without, it is there"
    )
    func markerScan() async throws {
        for encrypted in [true, false] {
            let directory = TemporaryDirectory()
            let collector = try await TestCollector(directory)
            let marker = "SEALMARK\(UInt32.random(in: 1_000_000...9_999_999))"
            var configuration = uploadingConfiguration(directory, collector: collector, batchSize: 500)
            if encrypted { configuration.encryption = .aesGCM(keyProvider: try TestKeys("k1")) }
            let engine = EventEngine(configuration: configuration)
            let heard = Protected<[String]>([])
            let registration = engine.on("secret") { event in
                heard.withLock { $0.append(event.parameters["note"]?.stringValue ?? "") }
            }
            try await engine.start()
            try engine.identify(userId: "user-\(marker)", traits: ["email": .string("\(marker)@example.com")])
            try engine.setContext(EventContext(custom: ["note": .string("context-\(marker)")]))
            for index in 0..<20 { try engine.record("secret", parameters: ["note": .string("\(marker)-\(index)")]) }
            // Targets: a group's id, and an alias's previous id (the user above).
            try engine.group("group-\(marker)")
            try engine.alias("aliased-user")
            try await engine.settle()
            let database = directory.defaultDataStoreURL
            if encrypted {
                #expect(Self.found(marker, database) == 0, "\(PrivacyTests.occurrences(of: marker, besides: database))")
                let sqlite3 = try DamagedFiles.cli(
                    database.path, "SELECT name, parameters, typeof(sealed) FROM events WHERE name = 'secret' LIMIT 1")
                #expect(sqlite3 == "secret|null|blob", "names readable, parameters sealed")
                let targets = try DamagedFiles.cli(
                    database.path,
                    "SELECT type, quote(target), typeof(sealed) FROM events WHERE type IN ('group', 'alias')")
                #expect(targets == "group|NULL|blob\nalias|NULL|blob", "types readable, targets sealed")
            } else {
                #expect(Self.found(marker, database) > 0, "the control: readable without encryption")
            }
            try await engine.flush()
            let bodies = collector.requests().map { String(decoding: $0.rawBody, as: UTF8.self) }.joined()
            let expected = [
                "\(marker)-19", "user-\(marker)", "\(marker)@example.com", "context-\(marker)",
                #""target":"group-\#(marker)""#, #""target":"user-\#(marker)""#,
            ]
            let missing = expected.filter { !bodies.contains($0) }
            #expect(missing.isEmpty, "the collector lacks \(missing)")
            try await waitUntil { heard.withLock { $0.count } == 20 }
            #expect(heard.withLock { $0 } == (0..<20).map { "\(marker)-\($0)" })
            registration.cancel()
            await engine.close()
            #expect((Self.found(marker, database) == 0) == encrypted, "after close")
        }
    }

    @Test(
        "P11: values sealed with a key the app lost move to the dead letters as undecryptable, reported; the queue flows behind them; with the key back they are requeued and sent in plaintext"
    )
    func wrongKey() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        func engine(_ keys: TestKeys, diagnostics: Protected<[SpoolDiagnostic]>? = nil) -> EventEngine {
            var configuration = uploadingConfiguration(directory, collector: collector, batchSize: 500)
            configuration.encryption = .aesGCM(keyProvider: keys)
            configuration.diagnosticHandler = { diagnostic in diagnostics?.withLock { $0.append(diagnostic) } }
            return EventEngine(configuration: configuration)
        }
        let first = engine(try TestKeys("k1"))
        try await first.start()
        let anonymous = try await first.identity().anonymousId
        try first.identify(userId: "lost-user", traits: ["plan": "pro"])
        let early = try recordEvents(first, 5, prefix: "early")
        try await first.settle()
        await first.close()

        let diagnostics = Protected<[SpoolDiagnostic]>([])
        let second = engine(try TestKeys("k2"), diagnostics: diagnostics)
        try await second.start()
        let late = try recordEvents(second, 3, prefix: "late")
        try await second.flush()
        let accepted = collector.acceptedIDs()
        #expect(Set(accepted).isSuperset(of: late), "the queue flows")
        #expect(Set(accepted).isDisjoint(with: early), "nothing sent as garbage")
        let lateBodies = collector.requests().map { String(decoding: $0.rawBody, as: UTF8.self) }.joined()
        let anonymousAlone = lateBodies.contains(anonymous) && !lateBodies.contains("lost-user")
        #expect(anonymousAlone, "the anonymous id alone")
        let letters = try await second.query { connection in
            try connection.scalarInt("SELECT count(*) FROM dead_letters WHERE reason = 'undecryptable'")
        }
        #expect(letters == 7, "session_start, identify and 5 events, still sealed")
        try await waitUntil { diagnostics.withLock { $0.contains { $0.kind == .undecryptableRows } } }
        let reported = diagnostics.withLock { $0.filter { $0.kind == .undecryptableRows }.map(\.eventCount) }
        #expect(reported.reduce(0, +) == 8, "7 events and the identity: \(reported)")
        await second.close()

        let back = engine(try TestKeys("k2", "k1"))
        try await back.start()
        #expect(try await back.requeueDeadLetters(.reasonContaining("undecryptable")) == 7)
        try await back.flush()
        #expect(Set(collector.acceptedIDs()).isSuperset(of: early))
        let bodies = collector.requests().map { String(decoding: $0.rawBody, as: UTF8.self) }.joined()
        let plaintext = bodies.contains(#""i":4"#) && bodies.contains("lost-user")
        #expect(plaintext, "in plaintext")
        let lost = collector.requests().filter(\.taken).compactMap { $0.loss?["dead_lettered"] }.reduce(0, +)
        #expect(lost == 7, "the collector was told of the 7 set aside (W4)")
        await back.close()
    }

    @Test(
        "P11: a flipped byte and a value moved to another event's row do not open: those two go to the dead letters, the rest is sent"
    )
    func tamperedRows() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        var configuration = uploadingConfiguration(directory, collector: collector, batchSize: 500)
        configuration.encryption = .aesGCM(keyProvider: try TestKeys("k1"))
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        let ids = try recordEvents(engine, 6)
        try await engine.settle()
        let (flipped, moved) = (ids[1], ids[3])
        try await engine.query { connection in
            let sealed = try connection.withStatement("SELECT sealed FROM events WHERE id = ?") { statement in
                try statement.bind(flipped, at: 1)
                _ = try statement.step()
                return Array(try #require(statement.blob(at: 0)))
            }
            var changed = sealed
            changed[changed.count - 20] ^= 0x40
            try connection.withStatement("UPDATE events SET sealed = ? WHERE id = ?") { statement in
                try statement.bindBlob(changed, at: 1)
                try statement.bind(flipped, at: 2)
                try statement.step()
            }
            try connection.withStatement(
                "UPDATE events SET sealed = (SELECT sealed FROM events WHERE id = ?) WHERE id = ?"
            ) { statement in
                try statement.bind(ids[2], at: 1)
                try statement.bind(moved, at: 2)
                try statement.step()
            }
        }
        try await engine.flush()
        let accepted = Set(collector.acceptedIDs())
        #expect(accepted.isSuperset(of: [ids[0], ids[2], ids[4], ids[5]]))
        #expect(!accepted.contains(flipped) && !accepted.contains(moved))
        let letters = try await engine.query { connection in
            try connection.withStatement("SELECT id FROM dead_letters WHERE reason = 'undecryptable' ORDER BY seq") {
                statement in
                var ids: [String] = []
                while try statement.step() { ids.append(statement.string(at: 0)) }
                return ids
            }
        }
        #expect(letters == [flipped, moved])
        await engine.close()
    }

    @Test("P10: a durable listener catching up after a relaunch reads sealed rows and gets plaintext")
    func durableCatchUp() async throws {
        let directory = TemporaryDirectory()
        let keys = try TestKeys("k1")
        let listener = CollectingListener("catch-up")
        let first = try await startedEngine(directory, configure: { $0.encryption = .aesGCM(keyProvider: keys) }) {
            $0.events.addDurableObserver(listener, id: "warehouse")
        }
        try await first.settle()
        first.events.removeDurableObserver(id: "warehouse")  // keeps its place
        _ = try recordEvents(first, 5, parameters: { ["secret": .string("sealed-\($0)")] })
        try await first.settle()
        await first.close()
        #expect(!listener.customNames.contains("e0"), "not delivered while removed")

        let second = try await startedEngine(directory, configure: { $0.encryption = .aesGCM(keyProvider: keys) }) {
            $0.events.addDurableObserver(listener, id: "warehouse")
        }
        try await waitUntil { listener.customNames.count == 5 }
        let secrets = listener.received.withLock { $0.compactMap { $0.parameters["secret"]?.stringValue } }
        #expect(secrets == (0..<5).map { "sealed-\($0)" })
        await second.close()
    }

    @Test(
        "P10: a read of sealed rows keeps its buffers for the next read and frees those that grew past 1 MiB; every read opens the same values"
    )
    func rowBuffersKept() async throws {
        let directory = TemporaryDirectory()
        var configuration = EngineConfiguration(database: .file(directory.databaseURL))
        configuration.encryption = .aesGCM(keyProvider: try TestKeys("k1"))
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        for index in 0..<300 { try engine.record("small", parameters: ["i": .int(index)]) }
        try await engine.settle()
        func read() async throws -> (parameters: [String], kept: Bool) {
            try await engine.query { connection in
                var parameters: [String] = []
                try connection.forEachEventRow(after: 0, limit: 1_000, now: 0) { row in
                    parameters.append(String(decoding: row.parameters, as: UTF8.self))
                    return true
                }
                return (parameters, connection.sealing?.spareRowBuffers != nil)
            }
        }
        let first = try await read()
        let second = try await read()
        #expect(first.parameters.filter { $0.hasPrefix("{\"i\":") }.count == 300)
        #expect(second.parameters == first.parameters, "the kept buffers hold no value of the read before")
        #expect(first.kept && second.kept)
        // 20 events of 100 KB: a chunk of rows passes 1 MiB.
        let large = String(repeating: "x", count: 100_000)
        for _ in 0..<20 { try engine.record("large", parameters: ["blob": .string(large)]) }
        try await engine.settle()
        let grown = try await read()
        #expect(grown.parameters.count == first.parameters.count + 20)
        #expect(grown.parameters.suffix(20).allSatisfy { $0.count > 100_000 })
        #expect(!grown.kept, "freed, so the connection keeps little")
        await engine.close()
    }
}
