import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

struct MigrationTests {
    let migrator = Migrator(migrations: Migration.embedded)

    @Test func embeddedMigrationsAreNumberedFromOne() {
        #expect(!Migration.embedded.isEmpty)
        #expect(Migration.embedded.map(\.version) == Array(1...Migration.embedded.count))
    }

    @Test("the committed EmbeddedMigrations.swift matches Migrations/*.sql (run scripts/embed-migrations)")
    func embeddedMigrationsMatchTheFiles() throws {
        let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Migrations")
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.path)
            .filter { $0.hasSuffix(".sql") }.sorted()
        #expect(files.count == Migration.embedded.count, "a migration file is missing from the embedded list")
        for (file, migration) in zip(files, Migration.embedded) {
            let sql = try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
            #expect(file == String(format: "%04d_%@.sql", migration.version, migration.name))
            #expect(sql == migration.sql, "\(file) differs from its embedded copy")
        }
    }

    @Test func aFreshDatabaseReachesTheLatestVersion() throws {
        let directory = TemporaryDirectory()
        let database = try DatabaseQueue(path: directory.databaseURL.path)
        defer { database.close() }
        try database.sync { connection in
            #expect(try migrator.currentVersion(connection) == migrator.latestVersion)
            #expect(try connection.scalarInt("SELECT count(*) FROM schema_migrations") == migrator.latestVersion)
            for table in ["events", "consumers", "event_history", "dead_letters"] {
                let sql = try connection.scalarString("SELECT sql FROM sqlite_master WHERE name = '\(table)'")
                #expect(sql.hasSuffix("STRICT"), "\(table) is STRICT")
            }
        }
    }

    @Test func migratingAgainIsANoOp() throws {
        let directory = TemporaryDirectory()
        try DatabaseQueue(path: directory.databaseURL.path).close()
        let database = try DatabaseQueue(path: directory.databaseURL.path)
        defer { database.close() }
        try database.sync { connection in
            let before = try connection.scalarString(
                "SELECT group_concat(version || ':' || applied_at) FROM schema_migrations")
            try migrator.migrate(connection)
            let after = try connection.scalarString(
                "SELECT group_concat(version || ':' || applied_at) FROM schema_migrations")
            #expect(before == after)
        }
    }

    @Test func everyEarlierVersionMigratesWithItsRowsKept() throws {
        for start in 0..<migrator.latestVersion {
            let directory = TemporaryDirectory()
            let connection = try Connection(path: directory.databaseURL.path, options: ConnectionOptions())
            try migrator.migrate(connection, upTo: start)
            #expect(try migrator.currentVersion(connection) == start)
            let hasEvents = start >= 1
            if hasEvents {
                try connection.execute(
                    """
                    INSERT INTO events (id, name, parameters, recorded_at) VALUES
                      ('0190a0a0-0000-7000-8000-000000000001', 'kept', '{"a":1}', 1700000000.5);
                    INSERT INTO consumers (id, position, updated_at) VALUES ('uploader', 0, 1700000000);
                    INSERT INTO event_history (name, recorded_at) VALUES ('kept', 1700000000.5);
                    """)
            }
            try migrator.migrate(connection)
            #expect(try migrator.currentVersion(connection) == migrator.latestVersion)
            if hasEvents {
                #expect(
                    try connection.scalarString("SELECT name || json_extract(parameters, '$.a') FROM events") == "kept1"
                )
                #expect(try connection.scalarInt("SELECT count(*) FROM consumers") == 1)
                #expect(try connection.scalarInt("SELECT count(*) FROM event_history") == 1)
            }
            connection.close()
        }
    }

    @Test("0005 merges the history into one row per name and millisecond, as the writer keys them")
    func historyMergesIntoMilliseconds() throws {
        let directory = TemporaryDirectory()
        let connection = try Connection(path: directory.databaseURL.path, options: ConnectionOptions())
        defer { connection.close() }
        try migrator.migrate(connection, upTo: 4)
        // Times whose products by 1000 sit on, just below and just above a
        // millisecond, before 1970, and far out.
        let times: [Double] = [
            1_764_411_330.123, 1_764_411_330.1234, 1_764_411_330.1239, 1_764_411_330.124, 0.001, 0.0009999,
            -0.0004, -1.5005, 1e-9, 253_402_300_799.999, 1_700_000_000.5,
        ]
        for (index, time) in times.enumerated() {
            for name in index.isMultiple(of: 2) ? ["x", "y"] : ["x"] {
                try connection.withStatement("INSERT INTO event_history (name, recorded_at) VALUES (?, ?)") {
                    try $0.bind(name, at: 1)
                    try $0.bind(time, at: 2)
                    try $0.step()
                }
            }
        }
        try migrator.migrate(connection)
        var expected: [String: Int] = [:]
        for (index, time) in times.enumerated() {
            for name in index.isMultiple(of: 2) ? ["x", "y"] : ["x"] {
                expected["\(name) \(HistoryMillisecond.of(time))", default: 0] += 1
            }
        }
        var merged: [String: Int] = [:]
        try connection.withStatement("SELECT name, recorded_at, occurrences FROM event_history") { statement in
            while try statement.step() {
                merged["\(statement.string(at: 0)) \(statement.double(at: 1))"] = statement.int(at: 2)
            }
        }
        #expect(merged == expected)
        #expect(merged.values.reduce(0, +) == times.count + (times.count + 1) / 2)
        // The writer's upsert relies on this unique key.
        #expect(
            try connection.scalarInt(
                "SELECT \"unique\" FROM pragma_index_list('event_history') WHERE name = 'event_history_by_name_time'")
                == 1)
    }

    @Test func aNewerSchemaIsRefusedAndLeftUntouched() throws {
        let directory = TemporaryDirectory()
        try DatabaseQueue(path: directory.databaseURL.path).close()
        let newer = migrator.latestVersion + 1
        do {
            let connection = try Connection(path: directory.databaseURL.path, options: ConnectionOptions())
            try connection.execute("PRAGMA user_version = \(newer)")
            try connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            connection.close()
        }
        let before = try Data(contentsOf: directory.databaseURL)
        #expect(
            throws: StorageError.schemaTooNew(
                path: directory.databaseURL.path, version: newer, latestKnown: migrator.latestVersion)
        ) {
            _ = try DatabaseQueue(path: directory.databaseURL.path)
        }
        #expect(try Data(contentsOf: directory.databaseURL) == before)
    }
}
