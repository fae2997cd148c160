import CSQLite
import Foundation

/// The baseline: the SQLite C API used directly, as a careful engineer would
/// write it by hand. No Spool code runs here.
final class RawSQLite {
    let handle: OpaquePointer

    init(path: String, synchronous: String = "NORMAL") {
        var handle: OpaquePointer?
        precondition(sqlite3_open(path, &handle) == SQLITE_OK)
        self.handle = handle!
        exec("PRAGMA journal_mode = WAL")
        exec("PRAGMA synchronous = \(synchronous)")
        exec("PRAGMA busy_timeout = 5000")
        exec("PRAGMA foreign_keys = ON")
        // Deletes as Spool's connections make them, whatever the library's
        // compiled default: drains compare queue logic, not this pragma.
        exec("PRAGMA secure_delete = FAST")
    }

    deinit {
        sqlite3_close_v2(handle)
    }

    func exec(_ sql: String) {
        let code = sqlite3_exec(handle, sql, nil, nil, nil)
        precondition(code == SQLITE_OK, "\(sql): \(String(cString: sqlite3_errmsg(handle)))")
    }

    func prepare(_ sql: String) -> OpaquePointer {
        var statement: OpaquePointer?
        precondition(sqlite3_prepare_v2(handle, sql, -1, &statement, nil) == SQLITE_OK)
        return statement!
    }

    /// The log table with only its INTEGER PRIMARY KEY: no CHECKs, no
    /// AUTOINCREMENT, no other index.
    func createPlainEventsTable() {
        exec(
            """
            CREATE TABLE events (seq INTEGER PRIMARY KEY, id TEXT, name TEXT, parameters TEXT,
                                 recorded_at REAL, session_id TEXT, priority INTEGER)
            """)
    }

    /// The same columns with Spool's constraints (STRICT, NOT NULL, the
    /// json_valid and priority CHECKs): shows what the schema itself costs.
    func createCheckedEventsTable() {
        exec(
            """
            CREATE TABLE events (seq INTEGER PRIMARY KEY, id TEXT NOT NULL, name TEXT NOT NULL,
                                 parameters TEXT NOT NULL CHECK (json_valid(parameters)),
                                 recorded_at REAL NOT NULL, session_id TEXT,
                                 priority INTEGER NOT NULL DEFAULT 0 CHECK (priority IN (0, 1))) STRICT
            """)
    }

    /// Inserts `count` rows with the given values, `perTransaction` per
    /// transaction, through one prepared statement.
    func insertEvents(count: Int, perTransaction: Int, id: String, name: String, parameters: String, session: String) {
        let insert = prepare(
            "INSERT INTO events (id, name, parameters, recorded_at, session_id, priority) VALUES (?, ?, ?, ?, ?, 0)")
        defer { sqlite3_finalize(insert) }
        var index = 0
        while index < count {
            exec("BEGIN IMMEDIATE")
            let end = min(count, index + perTransaction)
            while index < end {
                bindText(insert, 1, id)
                bindText(insert, 2, name)
                bindText(insert, 3, parameters)
                sqlite3_bind_double(insert, 4, Date().timeIntervalSince1970)
                bindText(insert, 5, session)
                precondition(sqlite3_step(insert) == SQLITE_DONE)
                sqlite3_reset(insert)
                index += 1
            }
            exec("COMMIT")
        }
    }

    func bindText(_ statement: OpaquePointer, _ index: Int32, _ text: String) {
        var text = text
        text.withUTF8 { bytes in
            bytes.withMemoryRebound(to: CChar.self) {
                _ = spool_bind_text(statement, index, $0.baseAddress, Int32($0.count))
            }
        }
    }
}
