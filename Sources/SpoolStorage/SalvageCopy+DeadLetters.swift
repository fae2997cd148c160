import CSQLite
import Foundation

/// The dead letters, and the columns events and dead letters share since
/// identities were kept (type, target, identity, context).
extension SalvageCopy {
    func copyDeadLetters(row: () throws -> Void) throws -> SalvageSource.Scan {
        let insert = try fresh.cachedStatement(
            """
            INSERT OR IGNORE INTO dead_letters \
            (seq, id, name, parameters, recorded_at, session_id, status, reason, failed_at, type, target, \
            identity_id, context_id, sealed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """)
        defer { insert.reset() }
        return try reader.scan(
            "dead_letters",
            select: """
                seq, id, name, parameters, recorded_at, session_id, status, reason, failed_at, \
                typeof(id) = 'text' AND typeof(name) = 'text' AND typeof(parameters) = 'text' \
                AND typeof(recorded_at) IN ('real', 'integer') AND typeof(session_id) IN ('text', 'null') \
                AND typeof(status) IN ('integer', 'null') AND typeof(reason) = 'text' \
                AND typeof(failed_at) IN ('real', 'integer') AND seq = rowid, \(messageColumns("dead_letters")), \
                \(sealedColumn("dead_letters"))
                """
        ) { source in
            guard source.int64(at: 10) == 1 else { return false }
            try bindMessageColumns(from: source, at: 11, to: insert, at: 10)
            try insert.bindBlob(source.blob(at: 15).map(Array.init), at: 14)
            try insert.bind(source.int64(at: 1), at: 1)
            for column: Int32 in 2...4 { try insert.bindText(source.bytes(at: column), at: column) }
            try insert.bind(source.double(at: 5), at: 5)
            if source.isNull(at: 6) {
                try insert.bindNull(at: 6)
            } else {
                try insert.bindText(source.bytes(at: 6), at: 6)
            }
            if source.isNull(at: 7) { try insert.bindNull(at: 7) } else { try insert.bind(source.int64(at: 7), at: 7) }
            try insert.bindText(source.bytes(at: 8), at: 8)
            try insert.bind(source.double(at: 9), at: 9)
            try insert.step()
            insert.resetKeepingBindings()
            try row()
            return true
        }
    }

    /// The message columns of `table` (type, target, identity, context) as
    /// the damaged file has them, or their values for a file from before
    /// they existed; a type the schema does not know reads as a `track`.
    func messageColumns(_ table: String) -> String {
        guard (reader.columns[table] ?? []).contains("type") else { return "'track', NULL, NULL, NULL" }
        return """
            CASE WHEN type IN ('track', 'screen', 'identify', 'group', 'alias') THEN type ELSE 'track' END, \
            target, identity_id, context_id
            """
    }

    /// The `sealed` column of `table` as the damaged file has it: a blob,
    /// or NULL (also for a file from before values were sealed).
    func sealedColumn(_ table: String) -> String {
        (reader.columns[table] ?? []).contains("sealed") ? "CASE WHEN typeof(sealed) = 'blob' THEN sealed END" : "NULL"
    }

    /// Binds the four ``messageColumns(_:)`` read at `first` as they are.
    func bindMessageColumns(from source: Statement, at first: Int32, to insert: Statement, at index: Int32)
        throws
    {
        try bindColumns(4, from: source, at: first, to: insert, at: index)
    }

    /// Binds an event's `launch` and `launch_ms` read at `first` as they are.
    func bindLaunchColumns(from source: Statement, at first: Int32, to insert: Statement, at index: Int32)
        throws
    {
        try bindColumns(2, from: source, at: first, to: insert, at: index)
    }

    private func bindColumns(
        _ count: Int32, from source: Statement, at first: Int32, to insert: Statement, at index: Int32
    ) throws {
        for offset: Int32 in 0..<count {
            let code = sqlite3_bind_value(
                insert.handle, index + offset, sqlite3_column_value(source.handle, first + offset))
            guard code == SQLITE_OK else { throw fresh.error(code, sql: nil) }
        }
    }
}
