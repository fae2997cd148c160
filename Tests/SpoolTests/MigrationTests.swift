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
