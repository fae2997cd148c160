import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Keys that change (P12), files and keys an engine must refuse (P13), and
/// sealed values through a crash and a salvage (P10).
@Suite(.needsChildProcesses)
struct EncryptionKeyTests {
    @Test(
        "P12: after rotation old values open with their key while the provider returns it; reencryptAll seals everything with the new key, after which the old key is not needed"
    )
    func rotation() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let keys = try TestKeys("k1")
        func engine() -> EventEngine {
            var configuration = uploadingConfiguration(directory, collector: collector, batchSize: 500)
            configuration.encryption = .aesGCM(keyProvider: keys)
            return EventEngine(configuration: configuration)
        }
        let first = engine()
        try await first.start()
        try first.identify(userId: "rotating", traits: ["plan": "pro"])
        let before = try recordEvents(first, 4, prefix: "before")
        try await first.settle()
        await first.close()

        try keys.makeCurrent("k2")
        let second = engine()
        try await second.start()
        let after = try recordEvents(second, 4, prefix: "after")
        try await second.settle()
        #expect(Set(try await EncryptionTests.keyIDs(second, "events")) == ["k1", "k2"])
        try await second.flush()
        #expect(Set(collector.acceptedIDs()).isSuperset(of: before + after), "k1's values open while it is there")

        let queued = try recordEvents(second, 4, prefix: "queued")
        try await second.settle()
        try keys.makeCurrent("k3")
        let report = try await second.reencryptAll()
        #expect(report.keyID == "k3" && report.undecryptable == 0)
        #expect(report.resealed >= 4 + 2, "the queued events, the identities, ...: \(report.resealed)")
        for table in ["events", "identities"] {
            #expect(Set(try await EncryptionTests.keyIDs(second, table)) == ["k3"], "\(table)")
        }
        #expect(try await second.reencryptAll().resealed == 0, "nothing left to seal again")
        await second.close()

        keys.forget("k1")
        keys.forget("k2")
        let third = engine()
        try await third.start()
        try await third.flush()
        #expect(Set(collector.acceptedIDs()).isSuperset(of: queued))
        let bodies = collector.requests().map { String(decoding: $0.rawBody, as: UTF8.self) }.joined()
        let identified = bodies.contains("rotating")
        #expect(identified, "the identity sealed again opens")
        #expect(try await third.query { try $0.deadLetterCount() } == 0)
        await third.close()
    }

    @Test(
        "P12: reencryptAll seals the values written before encryption was turned on, and leaves no byte of them in the db, -wal or -shm"
    )
    func sealingWhatWasReadable() async throws {
        let directory = TemporaryDirectory()
        let marker = "PLAINMARK\(UInt32.random(in: 1_000_000...9_999_999))"
        let plain = try await startedEngine(directory)
        try plain.identify(userId: "user-\(marker)")
        for index in 0..<50 { try plain.record("plain", parameters: ["note": .string("\(marker)-\(index)")]) }
        try plain.group("group-\(marker)")
        try await plain.settle()
        await plain.close()
        #expect(EncryptionTests.found(marker, directory.databaseURL) > 0)

        let sealed = try await startedEngine(directory) {
            $0.encryption = .aesGCM(keyProvider: try! TestKeys("k1"))  // try!: a fixed, valid key
        }
        let report = try await sealed.reencryptAll()
        #expect(report.resealed >= 52)
        let stored = try await sealed.query { try $0.readEvents(after: 0, limit: .max, now: 0) }
        #expect(stored.filter { $0.name == "plain" }.count == 50)
        #expect(stored.contains { $0.parametersJSON.contains("\(marker)-49") }, "still readable through the engine")
        #expect(stored.contains { $0.type == "group" && $0.target == "group-\(marker)" }, "the group's id too")
        await sealed.close()
        #expect(
            EncryptionTests.found(marker, directory.databaseURL) == 0,
            "\(PrivacyTests.occurrences(of: marker, besides: directory.databaseURL))")
    }

    @Test(
        "P10: a group's id stays sealed as a dead letter and when requeued; reencryptAll seals a target left readable beside a sealed value"
    )
    func sealedTargets() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let marker = "TARGETMARK\(UInt32.random(in: 1_000_000...9_999_999))"
        var configuration = uploadingConfiguration(
            directory, collector: collector, batchSize: 100, timerInterval: 3_600,
            request: UploadRequestOptions(compression: .identity))
        configuration.encryption = .aesGCM(keyProvider: try TestKeys("k1"))
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        guard case .recorded(let group) = try engine.group("group-\(marker)") else {
            Issue.record("the group was not recorded")
            return
        }
        let carrier = try recordEvents(engine, 3, prefix: "carrier")
        try await engine.settle()
        try await collector.control(["reject_ids": [group]])
        try await engine.flush()
        #expect(try await engine.query { try $0.deadLetterCount() } == 1)
        try await collector.control(["reject_ids": [String]()])
        let database = directory.defaultDataStoreURL
        let row = try DamagedFiles.cli(database.path, "SELECT type, quote(target), typeof(sealed) FROM dead_letters")
        #expect(row == "group|NULL|blob", "the dead letter's target is sealed")

        // Nothing goes out until the end: the rows stay in the file.
        try await engine.pauseUploads()
        #expect(try await engine.requeueDeadLetters(.all) == 1)
        // A target readable beside a sealed value (written by hand here).
        _ = try recordEvents(engine, 1, prefix: "readable-")
        try await engine.settle()
        await engine.close()
        _ = try DamagedFiles.cli(
            database.path, "UPDATE events SET target = 'readable-\(marker)' WHERE name = 'readable-0'")
        #expect(EncryptionTests.found(marker, database) > 0, "the control: the hand-written target")

        let reopened = EventEngine(configuration: configuration)
        try await reopened.start()
        _ = try await reopened.reencryptAll()
        let moved = try DamagedFiles.cli(database.path, "SELECT quote(target) FROM events WHERE name = 'readable-0'")
        #expect(moved == "NULL", "the readable target is sealed with the parameters")
        let stored = try await reopened.query { try $0.readEvents(after: 0, limit: .max, now: 0) }
        #expect(stored.first { $0.id == group }?.target == "group-\(marker)", "requeued, sealed again")
        #expect(stored.first { $0.name == "readable-0" }?.target == "readable-\(marker)", "moved into the value")
        try await reopened.resumeUploads()
        try await reopened.flush()
        let bodies = collector.requests().map { String(decoding: $0.rawBody, as: UTF8.self) }.joined()
        #expect(bodies.contains(#""target":"group-\#(marker)""#), "the collector gets the requeued group's id")
        #expect(Set(collector.acceptedIDs()).isSuperset(of: carrier + [group]))
        await reopened.close()
        #expect(
            EncryptionTests.found(marker, database) == 0,
            "\(PrivacyTests.occurrences(of: marker, besides: database))")
    }

    @Test(
        "P10: targets readable beside sealed values (rows sealed before migration 0016) are sealed at the first start with encryption, also through a salvage, migrated or not",
        arguments: ["", "UPDATE log_head SET last_seq = 1", "PRAGMA user_version = 99"])
    func readableTargetsSealedAtStart(damage: String) async throws {
        let directory = TemporaryDirectory()
        let marker = "OLDTARGET\(UInt32.random(in: 1_000_000...9_999_999))"
        func configure(_ configuration: inout EngineConfiguration) {
            configuration.encryption = .aesGCM(keyProvider: try! TestKeys("k1"))  // try!: a fixed, valid key
        }
        let engine = try await startedEngine(directory, configure: configure)
        for index in 0..<5 { try engine.group("group-\(index)-\(marker)") }
        _ = try recordEvents(engine, 20)
        try await engine.settle()
        // The rows as a library without migration 0016 sealed them: the
        // parameters alone sealed, the target readable.
        try await engine.query { connection in
            let rows = try connection.withStatement("SELECT seq, id, sealed FROM events WHERE type = 'group'") {
                statement in
                var rows: [(seq: Int64, id: String, json: String, target: String?)] = []
                while try statement.step() {
                    let id = statement.string(at: 1)
                    let opened = try #require(
                        connection.openEvent(readable: "null", target: nil, sealed: statement.blob(at: 2), eventID: id))
                    rows.append((statement.int64(at: 0), id, opened.parametersJSON, opened.target))
                }
                return rows
            }
            for row in rows {
                let sealed = try #require(try connection.sealEvent(row.json, target: nil, eventID: row.id))
                try connection.withStatement("UPDATE events SET target = ?, sealed = ? WHERE seq = ?") { update in
                    try update.bind(row.target, at: 1)
                    try update.bindBlob(sealed, at: 2)
                    try update.bind(row.seq, at: 3)
                    try update.step()
                }
            }
        }
        await engine.close()
        let path = directory.databaseURL.path
        _ = try DamagedFiles.cli(
            path,
            "DROP TABLE rebuild_pending; DROP TABLE sealed_targets_pending; ALTER TABLE sealing DROP COLUMN key_id; "
                + "DELETE FROM schema_migrations WHERE version >= 16; "
                + "PRAGMA user_version = 15; VACUUM")
        // The head below the rows (migrated, then salvaged), or a newer
        // schema (salvaged as it is): the next start salvages the file.
        if !damage.isEmpty { _ = try DamagedFiles.cli(path, damage) }
        #expect(EncryptionTests.found(marker, directory.databaseURL) > 0, "the control: readable targets")

        let upgraded = try await startedEngine(directory, configure: configure)
        #expect((upgraded.salvageReport != nil) == !damage.isEmpty)
        let readable = try DamagedFiles.cli(path, "SELECT count(*) FROM events WHERE target IS NOT NULL")
        #expect(readable == "0", "targets sealed at start")
        #expect(try DamagedFiles.cli(path, "SELECT count(*) FROM sealed_targets_pending") == "0")
        let stored = try await upgraded.query { try $0.readEvents(after: 0, limit: .max, now: 0) }
        let targets = stored.filter { $0.type == "group" }.compactMap(\.target)
        #expect(targets == (0..<5).map { "group-\($0)-\(marker)" }, "the targets open with their values")
        await upgraded.close()
        #expect(
            EncryptionTests.found(marker, directory.databaseURL) == 0,
            "\(PrivacyTests.occurrences(of: marker, besides: directory.databaseURL))")
    }

    @Test(
        "P12: reencryptAll leaves no byte of values deleted before it (free pages included), and routine deletes stay FAST"
    )
    func sealingLeavesNoDeletedValues() async throws {
        let directory = TemporaryDirectory()
        let marker = "GONEMARK\(UInt32.random(in: 1_000_000...9_999_999))"
        // The queue bound deletes the oldest as they come: their bytes stay
        // in pages a routine (FAST) secure delete does not write again.
        let plain = try await startedEngine(directory) { $0.maximumRetainedEvents = 20 }
        for index in 0..<300 {
            try plain.record(
                "plain",
                parameters: ["note": .string("\(marker)-\(index)"), "pad": .string(String(repeating: "x", count: 200))])
        }
        try await plain.settle()
        await plain.close()
        #expect(EncryptionTests.found(marker, directory.databaseURL) > 0)

        let sealed = try await startedEngine(directory) {
            $0.encryption = .aesGCM(keyProvider: try! TestKeys("k1"))  // try!: a fixed, valid key
        }
        _ = try await sealed.reencryptAll()
        #expect(try await sealed.query { try $0.scalarInt("PRAGMA secure_delete") } == 2, "FAST, as before the call")
        await sealed.close()
        #expect(
            EncryptionTests.found(marker, directory.databaseURL) == 0,
            "\(PrivacyTests.occurrences(of: marker, besides: directory.databaseURL))")
    }

    @Test(
        "P13: a file holding sealed values is refused without encryption, and left as it was; a provider with no key fails start(); a key of the wrong size is refused"
    )
    func refusals() async throws {
        let directory = TemporaryDirectory()
        let sealed = try await startedEngine(directory) {
            $0.encryption = .aesGCM(keyProvider: try! TestKeys("k1"))  // try!: a fixed, valid key
        }
        _ = try recordEvents(sealed, 3)
        try await sealed.settle()
        await sealed.close()
        let count = "SELECT count(*) FROM events"
        let before = try DamagedFiles.cli(directory.databaseURL.path, count)

        let plain = EventEngine(configuration: EngineConfiguration(database: .file(directory.databaseURL)))
        await #expect(throws: SpoolError.sealedRowsWithoutEncryption(path: directory.databaseURL.path)) {
            try await plain.start()
        }
        #expect(try DamagedFiles.cli(directory.databaseURL.path, count) == before)
        await #expect(throws: SpoolError.self) { _ = try await plain.reencryptAll() }

        struct Locked: EncryptionKeyProvider {
            struct KeychainLocked: Error {}
            func currentKey() throws -> EncryptionKey { throw KeychainLocked() }
            func key(withID id: String) throws -> EncryptionKey? { nil }
        }
        var configuration = EngineConfiguration(database: .file(directory.databaseURL))
        configuration.encryption = .aesGCM(keyProvider: Locked())
        let locked = EventEngine(configuration: configuration)
        do {
            try await locked.start()
            Issue.record("started without a key")
        } catch SpoolError.encryptionKeyUnavailable(let reason) {
            #expect(reason.contains("KeychainLocked"))
        }
        #expect(throws: SpoolError.self) { try EncryptionKey(id: "short", bytes: [UInt8](repeating: 1, count: 16)) }
        #expect(throws: SpoolError.self) { try EncryptionKey(id: "", bytes: [UInt8](repeating: 1, count: 32)) }

        // With its key, the file opens and its events read in plaintext.
        let reopened = try await startedEngine(directory) {
            $0.encryption = .aesGCM(keyProvider: try! TestKeys("k1"))  // try!: a fixed, valid key
        }
        #expect(try await reopened.storedNames().filter { $0.hasPrefix("e") } == ["e0", "e1", "e2"])
        await reopened.close()
    }

    @Test(
        "P10: killed mid-commit, then salvaged: the marker is in no byte of the db, -wal, -shm or the copy set aside, and every acknowledged event reaches the collector in plaintext"
    )
    func crashAndSalvage() async throws {
        let directory = TemporaryDirectory()
        let marker = "CRASHMARK\(UInt32.random(in: 1_000_000...9_999_999))"
        let path = directory.databaseURL.path
        let child = buildProductsDirectory.appendingPathComponent("spool-crash-child").path
        let (lines, killed) = try await runUntilKilled(
            child, [path, marker, "--sealed"], milliseconds: 300, afterLine: "READY")
        #expect(killed)
        let acked = lines.compactMap { $0.hasPrefix("ACK ") ? Int($0.dropFirst(4)) : nil }
        try #require(!acked.isEmpty, "\(lines)")
        #expect(EncryptionTests.found(marker, directory.databaseURL) == 0, "after SIGKILL mid-commit")

        // Events past the head: the next start salvages the file.
        _ = try DamagedFiles.cli(path, "UPDATE log_head SET last_seq = 1")
        let collector = try await TestCollector(directory)
        var configuration = uploadingConfiguration(directory, collector: collector, batchSize: 5_000)
        configuration.database = .file(directory.databaseURL)
        configuration.encryption = .aesGCM(keyProvider: ChildKeys())
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        let report = try #require(engine.salvageReport)
        try await engine.flush()
        let bodies = collector.requests().map { String(decoding: $0.rawBody, as: UTF8.self) }.joined()
        let missing = acked.filter { !bodies.contains("\"\(marker)-\($0)\"") }
        #expect(missing.isEmpty, "acknowledged, not received in plaintext: \(missing)")
        let identified = bodies.contains("user-\(marker)") && bodies.contains("trait-\(marker)")
        #expect(identified, "the identity in plaintext")
        await engine.close()
        #expect(EncryptionTests.found(marker, directory.databaseURL) == 0, "the salvaged file")
        let copy = URL(fileURLWithPath: report.damagedCopyPath)
        #expect(EncryptionTests.found(marker, copy) == 0, "the copy set aside")
    }

    @Test(
        "P11: an engine without encryption on a file another process seals sets the sealed events aside and counts them in undecryptableRows"
    )
    func sealedRowsSetAsideWithoutEncryption() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        var configuration = uploadingConfiguration(directory, collector: collector, batchSize: 10)
        configuration.database = .file(directory.databaseURL)
        let undecryptable = Protected(0)
        configuration.diagnosticHandler = { diagnostic in
            if diagnostic.kind == .undecryptableRows { undecryptable.withLock { $0 += diagnostic.eventCount } }
        }
        let plain = EventEngine(configuration: configuration)
        try await plain.start()  // no sealed value yet: P13 lets it start
        let child = buildProductsDirectory.appendingPathComponent("spool-crash-child").path
        let (lines, _) = try await runUntilKilled(
            child, [directory.databaseURL.path, "SEALTAG", "--sealed"], milliseconds: 300, afterLine: "READY")
        let acknowledged = lines.filter { $0.hasPrefix("ACK ") }.count
        try #require(acknowledged > 0, "\(lines)")
        // One flush sets them all aside: a read whose rows all stay closed
        // reads on past them.
        try await plain.flush()
        let deadLettered = try await plain.uploadStatistics().deadLettered
        await plain.close()
        #expect(deadLettered >= acknowledged, "every sealed event kept as a dead letter")
        #expect(undecryptable.withLock { $0 } == deadLettered, "and counted")
    }
}

/// The key the crash child's `--sealed` mode seals with.
private struct ChildKeys: EncryptionKeyProvider {
    func currentKey() throws -> EncryptionKey {
        try EncryptionKey(id: "child", bytes: [UInt8](repeating: 0x5A, count: 32))
    }
    func key(withID id: String) throws -> EncryptionKey? { id == "child" ? try currentKey() : nil }
}
