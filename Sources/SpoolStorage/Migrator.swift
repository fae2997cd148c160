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
    /// - Returns: how many steps this call applied.
    /// - Throws: ``StorageError/schemaTooNew(path:version:latestKnown:)`` before
    ///   touching anything when the database is newer than this library;
    ///   ``StorageError/schemaUnexplained(path:version:reason:)``, with
    ///   nothing changed, when `user_version` does not match the tables (it
    ///   was lowered below tables that exist) or a step finds its work
    ///   already done.
    @discardableResult
    package func migrate(_ connection: Connection, upTo target: Int? = nil) throws -> Int {
        let current = try currentVersion(connection)
        guard current <= latestVersion else {
            throw StorageError.schemaTooNew(path: connection.path, version: current, latestKnown: latestVersion)
        }
        let target = target ?? latestVersion
        var applied = 0
        for migration in migrations where migration.version > current && migration.version <= target {
            try connection.transaction {
                // Under the write lock now: another process may have got here first.
                let version = try currentVersion(connection)
                guard version < migration.version else { return }
                try checkExplained(connection, version: version)
                do {
                    try connection.execute(migration.sql)
                } catch let error as SQLiteError where error.resultCode == .error {
                    // A schema error ("duplicate column name", "table … already
                    // exists"): the tables are not what `version` says.
                    throw StorageError.schemaUnexplained(
                        path: connection.path, version: version,
                        reason: "migration \(migration.version) (\(migration.name)) failed: \(error.message)")
                }
                try connection.withStatement(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"
                ) { statement in
                    try statement.bind(migration.version, at: 1)
                    try statement.bind(migration.name, at: 2)
                    // clock-exempt: names the file (`fileIdentity`), which a test's clock must not repeat.
                    try statement.bind(Date().timeIntervalSince1970, at: 3)
                    try statement.step()
                }
                // user_version cannot be bound; the value is our own embedded integer.
                try connection.execute("PRAGMA user_version = \(migration.version)")
                applied += 1
            }
        }
        return applied
    }

    /// Throws unless the tables are what `user_version` (`version`) says:
    /// none at 0, and `schema_migrations` ending at `version` otherwise.
    /// Read inside the step's transaction, so another process migrating the
    /// same file cannot be caught half-way.
    private func checkExplained(_ connection: Connection, version: Int) throws {
        let tables = try connection.scalarInt(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite!_%' ESCAPE '!'")
        func unexplained(_ reason: String) -> StorageError {
            StorageError.schemaUnexplained(path: connection.path, version: version, reason: reason)
        }
        guard version > 0 else {
            guard tables == 0 else { throw unexplained("user_version is 0, but the file already has \(tables) tables") }
            return
        }
        let hasLedger = try connection.scalarInt(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations'")
        guard hasLedger == 1 else { throw unexplained("the file has no schema_migrations table") }
        let applied = try connection.scalarInt("SELECT coalesce(max(version), 0) FROM schema_migrations")
        guard applied == version else {
            throw unexplained("user_version is \(version), but migrations up to \(applied) were applied")
        }
    }
}
