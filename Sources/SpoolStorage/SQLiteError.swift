import CSQLite

/// An error reported by SQLite.
///
/// It carries SQLite's result code, its message and the SQL that failed, so
/// callers can match on the code. It never carries bound values: event
/// parameters can be personal data.
public struct SQLiteError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A primary SQLite result code (`SQLITE_BUSY`, `SQLITE_FULL`, …).
    public struct ResultCode: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }

        public static let error = ResultCode(rawValue: SQLITE_ERROR)
        public static let busy = ResultCode(rawValue: SQLITE_BUSY)
        public static let locked = ResultCode(rawValue: SQLITE_LOCKED)
        public static let readOnly = ResultCode(rawValue: SQLITE_READONLY)
        public static let ioError = ResultCode(rawValue: SQLITE_IOERR)
        public static let corrupt = ResultCode(rawValue: SQLITE_CORRUPT)
        public static let full = ResultCode(rawValue: SQLITE_FULL)
        public static let cantOpen = ResultCode(rawValue: SQLITE_CANTOPEN)
        public static let constraint = ResultCode(rawValue: SQLITE_CONSTRAINT)
        public static let notADatabase = ResultCode(rawValue: SQLITE_NOTADB)
        public static let tooBig = ResultCode(rawValue: SQLITE_TOOBIG)
        public static let mismatch = ResultCode(rawValue: SQLITE_MISMATCH)

        public var description: String { String(cString: sqlite3_errstr(rawValue)) }
    }

    /// The primary result code.
    public var resultCode: ResultCode { ResultCode(rawValue: extendedResultCode & 0xFF) }
    /// The extended result code, as `sqlite3_extended_errcode` returned it.
    public let extendedResultCode: Int32
    /// SQLite's own message.
    public let message: String
    /// The statement that failed, if any. Bound values are never included.
    public let sql: String?

    public init(extendedResultCode: Int32, message: String, sql: String? = nil) {
        self.extendedResultCode = extendedResultCode
        self.message = message
        self.sql = sql
    }

    /// True for errors about one row's values (a constraint, a value too
    /// big, a type mismatch) rather than the database as a whole.
    package var isRowSpecific: Bool {
        resultCode == .constraint || resultCode == .tooBig || resultCode == .mismatch
    }

    public var description: String {
        var text = "SQLite error \(extendedResultCode) (\(resultCode)): \(message)"
        if let sql { text += " — while executing `\(sql)`" }
        return text
    }
}
