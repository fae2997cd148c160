import CSQLite
import Foundation

/// A damaged database opened only to read what is left of it, row by row,
/// stepping over what cannot be read.
///
/// It never writes to the file: no journal mode, no migration, queries
/// only (`query_only`), and no checkpoint when it closes, so the copy set
/// aside afterwards is the file as it was found (SQLite may rebuild the
/// `-shm` index, which is no data).
final class SalvageSource {
    let connection: Connection
    /// The tables the file's schema lists, with their columns; empty when
    /// the schema itself cannot be read.
    private(set) var columns: [String: Set<String>] = [:]
    /// Whether the schema could be read at all.
    private(set) var schemaReadable = false

    /// What one table's scan found.
    struct Scan {
        /// Rows the caller accepted.
        var accepted = 0
        /// Places where SQLite could not read on (a malformed page, an
        /// overflow chain cut): every row there is lost.
        var failures = 0
        /// A failure came before any row was accepted: the front of the
        /// table is gone too.
        var failedBeforeFirstRow = false
        /// The table is not in the schema, or nothing of it could be read.
        var unreadable = false
    }

    /// Opens the file at `path` without creating or configuring it; nil when
    /// SQLite cannot open it at all.
    init?(path: String) {
        var handle: OpaquePointer?
        let code = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nil)
        guard code == SQLITE_OK, let handle else {
            sqlite3_close_v2(handle)
            return nil
        }
        connection = Connection(adopting: handle, path: path)
        _ = spool_no_checkpoint_on_close(handle)
        sqlite3_busy_timeout(handle, 5_000)
        // Settings of this connection only; neither writes to the file.
        // cell_size_check turns some damage SQLite would read through into
        // errors this reader can step over.
        for pragma in ["PRAGMA query_only = 1", "PRAGMA cell_size_check = 1"] {
            do { try connection.execute(pragma) } catch { break }
        }
        readSchema()
    }

    deinit {
        connection.close()
    }

    private func readSchema() {
        do {
            let tables = try connection.withStatement(
                "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name"
            ) { statement in
                var names: [String] = []
                while try statement.step() { names.append(statement.string(at: 0)) }
                return names
            }
            for table in tables {
                columns[table] = try connection.withStatement("SELECT name FROM pragma_table_info(?)") { statement in
                    try statement.bind(table, at: 1)
                    var names = Set<String>()
                    while try statement.step() { names.insert(statement.string(at: 0)) }
                    return names
                }
            }
            schemaReadable = true
        } catch {
            // The schema's own pages are damaged: nothing can be found in
            // this file (`schemaReadable` stays false and says so).
            columns = [:]
        }
    }

    /// True when the schema holds Spool's log: the file is a Spool database.
    var isSpoolDatabase: Bool {
        columns["events"] != nil && columns["schema_migrations"] != nil
    }

    /// An integer the file holds in `sql`'s first column, nil when there is
    /// none or it cannot be read.
    func integer(_ sql: String) -> Int64? {
        do {
            return try connection.withStatement(sql) { statement in
                try statement.step() && !statement.isNull(at: 0) ? statement.int64(at: 0) : nil
            }
        } catch {
            return nil  // damaged where this lives: the caller goes without it
        }
    }

    /// The first migration's time, as ``Connection/fileIdentity()`` gives it.
    var identity: UInt64? {
        do { return try connection.fileIdentity() } catch { return nil }
    }
}

extension SQLiteError {
    /// A failure to read the file: what a salvage steps over.
    var isDamageOrRead: Bool {
        resultCode == .corrupt || resultCode == .notADatabase || resultCode == .ioError
            || resultCode == .error || resultCode == .mismatch || resultCode == .tooBig
    }
}
