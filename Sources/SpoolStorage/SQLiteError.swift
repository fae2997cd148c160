import CSQLite

/// An error reported by SQLite.
///
/// It carries SQLite's result code, its message and the SQL that failed, so
/// callers can match on the code. It never carries bound values: event
/// parameters can be personal data.
package struct SQLiteError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A primary SQLite result code (`SQLITE_BUSY`, `SQLITE_FULL`, …).
    package struct ResultCode: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        /// The code's number, as in SQLite's C API.
        package let rawValue: Int32
        /// The code with this number; any number is accepted.
        package init(rawValue: Int32) { self.rawValue = rawValue }

        /// `SQLITE_ERROR`: a generic error, such as an SQL error.
        package static let error = ResultCode(rawValue: SQLITE_ERROR)
        /// `SQLITE_BUSY`: another connection (often another process) held a
        /// lock for longer than the busy timeout.
        package static let busy = ResultCode(rawValue: SQLITE_BUSY)
        /// `SQLITE_LOCKED`: a conflict inside the same connection.
        package static let locked = ResultCode(rawValue: SQLITE_LOCKED)
        /// `SQLITE_READONLY`: the file or its directory cannot be written.
        package static let readOnly = ResultCode(rawValue: SQLITE_READONLY)
        /// `SQLITE_IOERR`: the operating system reported an I/O error.
        package static let ioError = ResultCode(rawValue: SQLITE_IOERR)
        /// `SQLITE_CORRUPT`: the database file is damaged.
        package static let corrupt = ResultCode(rawValue: SQLITE_CORRUPT)
        /// `SQLITE_FULL`: the disk (or the file size limit) is full.
        package static let full = ResultCode(rawValue: SQLITE_FULL)
        /// `SQLITE_CANTOPEN`: the file could not be opened.
        package static let cantOpen = ResultCode(rawValue: SQLITE_CANTOPEN)
        /// `SQLITE_CONSTRAINT`: a row broke a constraint of the schema.
        package static let constraint = ResultCode(rawValue: SQLITE_CONSTRAINT)
        /// `SQLITE_NOTADB`: the file is not a SQLite database.
        package static let notADatabase = ResultCode(rawValue: SQLITE_NOTADB)
        /// `SQLITE_TOOBIG`: a value is larger than SQLite allows.
        package static let tooBig = ResultCode(rawValue: SQLITE_TOOBIG)
        /// `SQLITE_MISMATCH`: a value of the wrong type for its column.
        package static let mismatch = ResultCode(rawValue: SQLITE_MISMATCH)

        /// SQLite's English description of the code (`database or disk is full`).
        package var description: String { String(cString: sqlite3_errstr(rawValue)) }
    }

    /// The primary result code.
    package var resultCode: ResultCode { ResultCode(rawValue: extendedResultCode & 0xFF) }
    /// The extended result code, as `sqlite3_extended_errcode` returned it.
    package let extendedResultCode: Int32
    /// SQLite's own message.
    package let message: String
    /// The statement that failed, if any. Bound values are never included.
    package let sql: String?
    /// Whether the statement that failed only reads. A value longer than
    /// SQLite's length limit (`SQLITE_TOOBIG`) met by such a statement is
    /// one SQLite never wrote: the bytes of a damaged page.
    package internal(set) var whileReading = false

    /// An error with SQLite's extended result code, its message and,
    /// optionally, the SQL that failed (never with bound values).
    package init(extendedResultCode: Int32, message: String, sql: String? = nil) {
        self.extendedResultCode = extendedResultCode
        self.message = message
        self.sql = sql
    }

    /// True for errors about one row's values (a constraint, a value too
    /// big, a type mismatch) rather than the database as a whole.
    package var isRowSpecific: Bool {
        resultCode == .constraint || resultCode == .tooBig || resultCode == .mismatch
    }

    /// The codes, SQLite's message and the statement, for logs.
    package var description: String {
        var text = "SQLite error \(extendedResultCode) (\(resultCode)): \(message)"
        if let sql { text += " — while executing `\(sql)`" }
        return text
    }
}
