import CSQLite

/// A prepared statement, owned by one ``Connection`` and used only on its
/// serial executor.
///
/// Statements come from the connection's cache; `reset()` clears bindings so
/// a cached statement never leaks a previous caller's values.
final class Statement {
    let handle: OpaquePointer
    let sql: String
    private unowned let connection: Connection

    init(connection: Connection, sql: String, persistent: Bool) throws {
        var handle: OpaquePointer?
        let flags = persistent ? UInt32(SQLITE_PREPARE_PERSISTENT) : 0
        let code = sqlite3_prepare_v3(connection.handle, sql, -1, flags, &handle, nil)
        guard code == SQLITE_OK, let handle else {
            sqlite3_finalize(handle)
            throw connection.error(code, sql: sql)
        }
        self.handle = handle
        self.sql = sql
        self.connection = connection
    }

    func finalize() {
        sqlite3_finalize(handle)
    }

    // MARK: - Binding (1-based indexes, as in SQLite)

    func bind(_ value: Int64, at index: Int32) throws {
        try check(sqlite3_bind_int64(handle, index, value))
    }

    func bind(_ value: Int, at index: Int32) throws {
        try check(sqlite3_bind_int64(handle, index, Int64(value)))
    }

    func bind(_ value: Double, at index: Int32) throws {
        try check(sqlite3_bind_double(handle, index, value))
    }

    func bind(_ value: Bool, at index: Int32) throws {
        try check(sqlite3_bind_int64(handle, index, value ? 1 : 0))
    }

    func bind(_ value: String?, at index: Int32) throws {
        guard var value else {
            try check(sqlite3_bind_null(handle, index))
            return
        }
        let code = value.withUTF8 { bytes in
            bytes.withMemoryRebound(to: CChar.self) { chars in
                spool_bind_text(handle, index, chars.baseAddress, Int32(chars.count))
            }
        }
        try check(code)
    }

    func bindNull(at index: Int32) throws {
        try check(sqlite3_bind_null(handle, index))
    }

    // MARK: - Stepping

    /// Steps once; returns true when a row is available.
    @discardableResult
    func step() throws -> Bool {
        let code = sqlite3_step(handle)
        switch code {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default: throw connection.error(code, sql: sql)
        }
    }

    /// Resets the statement and clears its bindings for the next use.
    func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    /// Resets the statement but keeps its bindings: for a loop that rebinds
    /// every parameter before each step.
    func resetKeepingBindings() {
        sqlite3_reset(handle)
    }

    // MARK: - Columns (0-based indexes, as in SQLite)

    func int64(at column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }
    func int(at column: Int32) -> Int { Int(sqlite3_column_int64(handle, column)) }
    func double(at column: Int32) -> Double { sqlite3_column_double(handle, column) }
    func isNull(at column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }

    func string(at column: Int32) -> String {
        guard let text = sqlite3_column_text(handle, column) else { return "" }
        let count = Int(sqlite3_column_bytes(handle, column))
        return String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self)
    }

    func optionalString(at column: Int32) -> String? {
        isNull(at: column) ? nil : string(at: column)
    }

    /// Calls `body` with the column's UTF-8 bytes without copying them into a
    /// String. The buffer is valid only inside `body`.
    func withUTF8<T>(at column: Int32, _ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        let text = sqlite3_column_text(handle, column)
        let count = Int(sqlite3_column_bytes(handle, column))
        return try body(UnsafeRawBufferPointer(start: text, count: text == nil ? 0 : count))
    }

    private func check(_ code: Int32) throws {
        if code != SQLITE_OK { throw connection.error(code, sql: sql) }
    }
}

@available(*, unavailable, message: "A statement belongs to its connection's serial executor")
extension Statement: Sendable {}
