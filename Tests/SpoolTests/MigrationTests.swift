import Foundation
import Testing

@_spi(Internals) @testable import Spool

struct MigrationTests {
    let migrator = Migrator(migrations: Migration.embedded)

    @Test func embeddedMigrationsAreNumberedFromOne() {
        #expect(!Migration.embedded.isEmpty)
        #expect(Migration.embedded.map(\.version) == Array(1...Migration.embedded.count))
    }

    @Test func aFreshDatabaseReachesTheLatestVersion() throws {
        let directory = TemporaryDirectory()
        let database = try DatabaseQueue(location: .file(directory.databaseURL))
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
        try DatabaseQueue(location: .file(directory.databaseURL)).close()
        let database = try DatabaseQueue(location: .file(directory.databaseURL))
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
        try DatabaseQueue(location: .file(directory.databaseURL)).close()
        let newer = migrator.latestVersion + 1
        do {
            let connection = try Connection(path: directory.databaseURL.path, options: ConnectionOptions())
            try connection.execute("PRAGMA user_version = \(newer)")
            try connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            connection.close()
        }
        let before = try Data(contentsOf: directory.databaseURL)
        #expect(
            throws: SpoolError.schemaTooNew(
                path: directory.databaseURL.path, version: newer, latestKnown: migrator.latestVersion)
        ) {
            _ = try DatabaseQueue(location: .file(directory.databaseURL))
        }
        #expect(try Data(contentsOf: directory.databaseURL) == before)
    }
}
