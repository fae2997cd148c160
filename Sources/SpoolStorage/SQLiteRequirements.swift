import CSQLite

/// What Spool needs from the SQLite library the app links, checked before any
/// file is touched: an older library (an old Linux distribution, or an OS
/// below the platform floor) must never leave a half-migrated file.
package enum SQLiteRequirements {
    /// STRICT tables, which the schema uses, arrived in SQLite 3.37.0.
    package static let minimumVersionNumber: Int32 = 3_037_000
    package static let minimumVersion = "3.37.0"

    /// The linked library's version, as SQLite spells it.
    package static var linkedVersion: String { String(cString: sqlite3_libversion()) }

    /// Checks the linked library once per process.
    ///
    /// - Throws: ``StorageError/unsupportedSQLite(version:reason:)``.
    package static func check() throws {
        try checked.get()
    }

    private static let checked: Result<Void, StorageError> = {
        let hasJSON: Bool
        var handle: OpaquePointer?
        if sqlite3_open_v2(":memory:", &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nil) == SQLITE_OK {
            hasJSON =
                sqlite3_exec(handle, "SELECT json_valid('{}'), json_extract('{}', '$')", nil, nil, nil) == SQLITE_OK
        } else {
            hasJSON = false
        }
        sqlite3_close_v2(handle)
        return Result {
            try check(versionNumber: sqlite3_libversion_number(), version: linkedVersion, hasJSONFunctions: hasJSON)
        }.mapError { $0 as? StorageError ?? .unsupportedSQLite(version: linkedVersion, reason: "\($0)") }
    }()

    /// The rule itself, for a given library.
    package static func check(versionNumber: Int32, version: String, hasJSONFunctions: Bool) throws {
        guard versionNumber >= minimumVersionNumber else {
            throw StorageError.unsupportedSQLite(
                version: version, reason: "STRICT tables need SQLite \(minimumVersion) or newer")
        }
        guard hasJSONFunctions else {
            throw StorageError.unsupportedSQLite(
                version: version, reason: "the JSON functions (json_valid, json_extract) are missing")
        }
    }
}
