import Foundation

/// One schema migration, embedded at build time from `Migrations/NNNN_name.sql`.
package struct Migration: Sendable {
    package let version: Int
    package let name: String
    package let sql: String
}

/// Applies migrations in version order, each in its own transaction, and
/// records each one in `schema_migrations` and `PRAGMA user_version`.
package struct Migrator {
    package let migrations: [Migration]

    package var latestVersion: Int { migrations.last?.version ?? 0 }

    /// The schema version the database is at (0 for a new file).
    package func currentVersion(_ connection: Connection) throws -> Int {
        try connection.scalarInt("PRAGMA user_version")
    }

    /// Migrates up to `target` (default: the latest). A no-op when already
    /// there.
    ///
    /// Several processes may open the same file at once (an app and its
    /// extension on first launch): each step re-reads the version inside its
    /// own `BEGIN IMMEDIATE` transaction, so a step another process applied
    /// meanwhile is skipped rather than run twice.
    ///
    /// - Throws: ``StorageError/schemaTooNew(path:version:latestKnown:)`` before
    ///   touching anything when the database is newer than this library.
    package func migrate(_ connection: Connection, upTo target: Int? = nil) throws {
        let current = try currentVersion(connection)
        guard current <= latestVersion else {
            throw StorageError.schemaTooNew(path: connection.path, version: current, latestKnown: latestVersion)
        }
        let target = target ?? latestVersion
        for migration in migrations where migration.version > current && migration.version <= target {
            try connection.transaction {
                // Under the write lock now: another process may have got here first.
                guard try currentVersion(connection) < migration.version else { return }
                try connection.execute(migration.sql)
                try connection.withStatement(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"
                ) { statement in
                    try statement.bind(migration.version, at: 1)
                    try statement.bind(migration.name, at: 2)
                    try statement.bind(Date().timeIntervalSince1970, at: 3)
                    try statement.step()
                }
                // user_version cannot be bound; the value is our own embedded integer.
                try connection.execute("PRAGMA user_version = \(migration.version)")
            }
        }
    }
}
