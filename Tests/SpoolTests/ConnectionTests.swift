import CSQLite
import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

struct ConnectionTests {
    @Test func pragmasAreAppliedAndChecked() throws {
        let directory = TemporaryDirectory()
        let connection = try Connection(path: directory.databaseURL.path, options: ConnectionOptions())
        defer { connection.close() }
        #expect(try connection.scalarString("PRAGMA journal_mode") == "wal")
        #expect(try connection.scalarInt("PRAGMA synchronous") == 1)
        #expect(try connection.scalarInt("PRAGMA busy_timeout") == 5_000)
        #expect(try connection.scalarInt("PRAGMA foreign_keys") == 1)
        // FAST (2), whatever the library's compiled default (ON on Debian).
        #expect(try connection.scalarInt("PRAGMA secure_delete") == 2)
    }

    /// An erasure leaves the connection's routine secure deletion as it
    /// found it (its own transaction turns it fully on: the privacy tests
    /// scan the files for an erased marker).
    @Test func erasureLeavesRoutineSecureDeletion() throws {
        let directory = TemporaryDirectory()
        let connection = try Connection(path: directory.databaseURL.path, options: ConnectionOptions())
        defer { connection.close() }
        _ = try Migrator(migrations: Migration.embedded).migrate(connection)
        try connection.execute(
            "INSERT INTO events (seq, id, name, parameters, recorded_at) VALUES (1, 'a', 'e', '{}', 0)")
        try connection.eraseAll(at: 0, owner: "test")
        #expect(try connection.scalarInt("PRAGMA secure_delete") == 2)
    }

    @Test(
        "the page cache stays at 2 MiB with 16 KiB pages, on the connection that creates the file and on one opening it again"
    )
    func pageCacheIsBoundedInBytes() throws {
        let directory = TemporaryDirectory()
        func cacheUsed(_ connection: Connection) -> Int {
            var current: Int32 = 0
            var highwater: Int32 = 0
            sqlite3_db_status(connection.handle, SQLITE_DBSTATUS_CACHE_USED, &current, &highwater, 0)
            return Int(current)
        }
        // Writes and reads about 12 MB: far more than the cache may hold.
        func churn(_ connection: Connection) throws {
            try connection.execute("CREATE TABLE IF NOT EXISTS t (x BLOB)")
            try connection.execute("BEGIN")
            for _ in 0..<3_000 {
                try connection.withStatement("INSERT INTO t (x) VALUES (randomblob(4000))") { try $0.step() }
            }
            try connection.execute("COMMIT")
            _ = try connection.scalarInt("SELECT sum(length(x)) FROM t")
        }
        for round in 0..<2 {
            let connection = try Connection(path: directory.databaseURL.path, options: ConnectionOptions())
            defer { connection.close() }
            #expect(try connection.scalarInt("PRAGMA page_size") == Connection.newFilePageSize)
            try churn(connection)
            let limit = Connection.pageCacheKibibytes * 1_024 * 11 / 10  // page headers besides
            #expect(cacheUsed(connection) <= limit, "round \(round): \(cacheUsed(connection) >> 10) KiB of page cache")
        }
    }

    @Test func fullSynchronousOnRequest() throws {
        let directory = TemporaryDirectory()
        let connection = try Connection(
            path: directory.databaseURL.path, options: ConnectionOptions(fullSynchronous: true))
        defer { connection.close() }
        #expect(try connection.scalarInt("PRAGMA synchronous") == 2)
    }

    @Test func newFilesAreCreatedWithMode0600() throws {
        let directory = TemporaryDirectory()
        let database = try DatabaseQueue(path: directory.databaseURL.path)
        try database.sync { try $0.execute("CREATE TABLE IF NOT EXISTS t (x)") }
        let attributes = try FileManager.default.attributesOfItem(atPath: directory.databaseURL.path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        let wal = try FileManager.default.attributesOfItem(atPath: directory.databaseURL.path + "-wal")
        #expect((wal[.posixPermissions] as? Int) == 0o600)
        database.close()
    }

    @Test func missingDirectoryIsATypedErrorNamingThePath() throws {
        let directory = TemporaryDirectory()
        let path = directory.file("no/such/dir/spool.sqlite")
        #expect {
            _ = try DatabaseQueue(path: path.path)
        } throws: { error in
            guard case StorageError.cannotOpen(let failedPath, let reason) = error else { return false }
            return failedPath == path.path && reason.contains("No such file")
        }
    }

    /// Root writes through permission bits; only Linux has a directory that
    /// refuses even root (sysfs).
    static let canMakeAnUnwritableDirectory: Bool = {
        #if os(Linux)
            return true
        #else
            return getuid() != 0
        #endif
    }()

    @Test(
        .enabled(
            if: ConnectionTests.canMakeAnUnwritableDirectory,
            "as root, permission bits refuse nothing, and only Linux has a directory that refuses root (sysfs)"))
    func unwritableDirectoryIsATypedErrorNamingThePath() throws {
        let directory = TemporaryDirectory()
        let path: URL
        if getuid() == 0 {
            #if os(Linux)
                // sysfs refuses even root.
                path = URL(fileURLWithPath: "/sys/spool-\(getpid()).sqlite")
            #else
                return  // skipped by the trait above
            #endif
        } else {
            try FileManager.default.setAttributes([.posixPermissions: 0o500], ofItemAtPath: directory.url.path)
            path = directory.databaseURL
        }
        defer { try? FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: directory.url.path) }
        #expect {
            _ = try DatabaseQueue(path: path.path)
        } throws: { error in
            guard case StorageError.cannotOpen(let failedPath, let reason) = error else { return false }
            return failedPath == path.path && reason.contains("ermission denied")
        }
    }

    @Test func aParentThatIsAFileIsATypedError() throws {
        let directory = TemporaryDirectory()
        try Data("x".utf8).write(to: directory.file("plain"))
        let path = directory.file("plain/spool.sqlite")
        #expect(throws: StorageError.cannotOpen(path: path.path, reason: "Not a directory")) {
            _ = try DatabaseQueue(path: path.path)
        }
    }

    @Test func aFileThatIsNotSQLiteIsNeverOverwritten() throws {
        let directory = TemporaryDirectory()
        let contents = Data(String(repeating: "these are my holiday photos, not a database\n", count: 200).utf8)
        try contents.write(to: directory.databaseURL)
        #expect(throws: StorageError.notADatabase(path: directory.databaseURL.path)) {
            _ = try DatabaseQueue(path: directory.databaseURL.path)
        }
        #expect(try Data(contentsOf: directory.databaseURL) == contents)
        #expect(!FileManager.default.fileExists(atPath: directory.databaseURL.path + "-wal"))
    }

    @Test func sqliteErrorsCarryCodeMessageAndSQLButNoValues() throws {
        let directory = TemporaryDirectory()
        let database = try DatabaseQueue(path: directory.databaseURL.path)
        defer { database.close() }
        let secret = "user@example.com"
        #expect {
            try database.sync { connection in
                try connection.withStatement(
                    "INSERT INTO events (id, name, parameters, recorded_at) VALUES (?, ?, ?, ?)"
                ) { statement in
                    try statement.bind("id", at: 1)
                    try statement.bind("name", at: 2)
                    try statement.bind("{not json \(secret)", at: 3)
                    try statement.bind(1.0, at: 4)
                    try statement.step()
                }
            }
        } throws: { error in
            guard let error = error as? SQLiteError else { return false }
            return error.resultCode == .constraint && error.sql?.contains("INSERT INTO events") == true
                && !error.description.contains(secret) && error.message.contains("CHECK")
        }
    }

    @Test func transactionsRollBackWhenTheBodyThrows() throws {
        struct Boom: Error {}
        let database = try DatabaseQueue(path: Connection.inMemoryPath)
        defer { database.close() }
        try database.sync { connection in
            try connection.execute("CREATE TABLE t (x INTEGER) STRICT")
            #expect(throws: Boom.self) {
                try connection.transaction {
                    try connection.execute("INSERT INTO t VALUES (1)")
                    throw Boom()
                }
            }
            #expect(try connection.scalarInt("SELECT count(*) FROM t") == 0)
            #expect(!connection.isInTransaction)
        }
    }
}
