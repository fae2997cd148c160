import CSQLite

/// A prepared statement, owned by one ``Connection`` and used only on its
/// serial executor.
///
/// Statements come from the connection's cache; `reset()` clears bindings so
/// a cached statement never leaks a previous caller's values.
package final class Statement {
    package let handle: OpaquePointer
    package let sql: String
    private unowned let connection: Connection

    package init(connection: Connection, sql: String, persistent: Bool) throws {
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

    package func finalize() {
        sqlite3_finalize(handle)
    }

    // MARK: - Binding (1-based indexes, as in SQLite)

    package func bind(_ value: Int64, at index: Int32) throws {
        try check(sqlite3_bind_int64(handle, index, value))
    }

    package func bind(_ value: Int, at index: Int32) throws {
        try check(sqlite3_bind_int64(handle, index, Int64(value)))
    }

    /// Binds `value`, or NULL.
    package func bind(_ value: Int64?, at index: Int32) throws {
        if let value {
            try bind(value, at: index)
        } else {
            try bindNull(at: index)
        }
    }

    package func bind(_ value: Double, at index: Int32) throws {
        try check(sqlite3_bind_double(handle, index, value))
    }

    package func bind(_ value: Bool, at index: Int32) throws {
        try check(sqlite3_bind_int64(handle, index, value ? 1 : 0))
    }

    package func bind(_ value: String?, at index: Int32) throws {
        guard var value else {
            try check(sqlite3_bind_null(handle, index))
            return
        }
        let code = value.withUTF8 { bytes in
            // SQLite takes an Int32 length; a longer string is SQLite's "too big".
            guard let length = Int32(exactly: bytes.count) else { return SQLITE_TOOBIG }
            return bytes.withMemoryRebound(to: CChar.self) { chars in
                spool_bind_text(handle, index, chars.baseAddress, length)
            }
        }
        try check(code)
    }

    /// Binds UTF-8 bytes as text *without a copy*: the bytes must stay valid
    /// until the statement has stepped (bind and step inside the same
    /// `withUTF8` scope), and every binding is replaced before the next step.
    /// For the writer's hot loop, where SQLite's copy (a malloc per value)
    /// showed in profiles.
    package func bindTextNoCopy(_ bytes: UnsafeBufferPointer<UInt8>, at index: Int32) throws {
        guard let length = Int32(exactly: bytes.count) else { throw connection.error(SQLITE_TOOBIG, sql: sql) }
        guard let text = UnsafeRawPointer(bytes.baseAddress)?.assumingMemoryBound(to: CChar.self) else {
            return try check(spool_bind_text(handle, index, "", 0))  // empty: no pointer to lend
        }
        // A null destructor is SQLITE_STATIC: SQLite does not copy.
        try check(sqlite3_bind_text(handle, index, text, length, nil))
    }

    /// Binds UTF-8 bytes as text (SQLite copies them).
    package func bindText(_ bytes: UnsafeRawBufferPointer, at index: Int32) throws {
        guard let length = Int32(exactly: bytes.count) else { throw connection.error(SQLITE_TOOBIG, sql: sql) }
        try check(spool_bind_text(handle, index, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), length))
    }

    /// Binds bytes as a blob *without a copy*: as ``bindTextNoCopy(_:at:)``,
    /// they must stay valid until the statement has stepped.
    package func bindBlobNoCopy(_ bytes: UnsafeRawBufferPointer, at index: Int32) throws {
        guard let length = Int32(exactly: bytes.count) else { throw connection.error(SQLITE_TOOBIG, sql: sql) }
        try check(sqlite3_bind_blob(handle, index, bytes.baseAddress, length, nil))
    }

    /// Binds bytes as a blob (SQLite copies them), or NULL for nil.
    package func bindBlob(_ bytes: [UInt8]?, at index: Int32) throws {
        guard let bytes else { return try bindNull(at: index) }
        guard let length = Int32(exactly: bytes.count) else { throw connection.error(SQLITE_TOOBIG, sql: sql) }
        try bytes.withUnsafeBytes { try check(spool_bind_blob(handle, index, $0.baseAddress, length)) }
    }

    package func bindNull(at index: Int32) throws {
        try check(sqlite3_bind_null(handle, index))
    }

    // MARK: - Stepping

    /// Steps once; returns true when a row is available.
    @discardableResult
    package func step() throws -> Bool {
        let code = sqlite3_step(handle)
        switch code {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            var error = connection.error(code, sql: sql)
            error.whileReading = sqlite3_stmt_readonly(handle) != 0
            throw error
        }
    }

    /// Resets the statement and clears its bindings for the next use.
    package func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    /// Resets the statement but keeps its bindings: for a loop that rebinds
    /// every parameter before each step.
    package func resetKeepingBindings() {
        sqlite3_reset(handle)
    }

    // MARK: - Columns (0-based indexes, as in SQLite)

    package func int64(at column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }
    /// The column as an `Int`, clamped where `Int` is 32 bits (watchOS on arm64_32).
    package func int(at column: Int32) -> Int { Int(clamping: sqlite3_column_int64(handle, column)) }
    package func double(at column: Int32) -> Double { sqlite3_column_double(handle, column) }
    package func isNull(at column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }

    package func string(at column: Int32) -> String {
        guard let text = sqlite3_column_text(handle, column) else { return "" }
        let count = Int(sqlite3_column_bytes(handle, column))
        return String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self)
    }

    package func optionalString(at column: Int32) -> String? {
        isNull(at: column) ? nil : string(at: column)
    }

    /// The column's bytes as SQLite holds them (text as UTF-8), without a
    /// copy. Valid only until the statement steps, resets or is finalized.
    package func bytes(at column: Int32) -> UnsafeRawBufferPointer {
        let text = sqlite3_column_text(handle, column)
        let count = Int(sqlite3_column_bytes(handle, column))
        return UnsafeRawBufferPointer(start: text, count: text == nil ? 0 : count)
    }

    /// A blob column's bytes without a copy, or nil when it is NULL. Valid
    /// only until the statement steps, resets or is finalized.
    package func blob(at column: Int32) -> UnsafeRawBufferPointer? {
        guard let bytes = sqlite3_column_blob(handle, column) else { return nil }
        return UnsafeRawBufferPointer(start: bytes, count: Int(sqlite3_column_bytes(handle, column)))
    }

    /// ``bytes(at:)``, or nil when the column is NULL.
    package func optionalBytes(at column: Int32) -> UnsafeRawBufferPointer? {
        isNull(at: column) ? nil : bytes(at: column)
    }

    private func check(_ code: Int32) throws {
        if code != SQLITE_OK { throw connection.error(code, sql: sql) }
    }
}

@available(*, unavailable, message: "A statement belongs to its connection's serial executor")
extension Statement: Sendable {}

/// Calls `body` with `string`'s UTF-8 bytes: in place when the string stores
/// them contiguously (every native string), else from a copy. Unlike
/// `String.withUTF8` it needs no mutable copy of the string to start from.
@inlinable @inline(__always)
package func withUTF8Bytes<R>(of string: String, _ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
    if let result = try string.utf8.withContiguousStorageIfAvailable(body) { return result }
    var copy = string
    return try copy.withUTF8(body)
}
