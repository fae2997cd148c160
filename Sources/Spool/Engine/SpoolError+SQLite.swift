import SpoolStorage

extension SpoolError {
    /// A failure SQLite reported: its result code, its message and the SQL
    /// that failed — never the bound values, which can be personal data.
    ///
    /// Carried by ``SpoolError/sqlite(_:)`` and
    /// ``SpoolError/stillBuffered(eventID:reason:)``. Match on its
    /// `resultCode` (`.full`, `.busy`, `.ioError`…) to tell a full disk from
    /// a locked file:
    ///
    /// ```swift
    /// do {
    ///     try await engine.start()
    /// } catch SpoolError.sqlite(let failure) where failure.resultCode == .busy {
    ///     // Another process holds the file's lock: try again later.
    /// }
    /// ```
    public struct SQLiteFailure: Sendable, Hashable, CustomStringConvertible {
        /// A primary SQLite result code (`SQLITE_BUSY`, `SQLITE_FULL`, …).
        ///
        /// The constants name the codes Spool's API can pass on; another
        /// code compares equal to `ResultCode(rawValue:)` of its number.
        public struct ResultCode: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
            /// The code's number, as in SQLite's C API.
            public let rawValue: Int32
            /// The code with this number; any number is accepted.
            public init(rawValue: Int32) { self.rawValue = rawValue }

            /// `SQLITE_ERROR`: a generic error, such as an SQL error.
            public static let error = ResultCode(SQLiteError.ResultCode.error)
            /// `SQLITE_BUSY`: another connection (often another process) held a
            /// lock for longer than the busy timeout.
            public static let busy = ResultCode(SQLiteError.ResultCode.busy)
            /// `SQLITE_READONLY`: the file or its directory cannot be written.
            public static let readOnly = ResultCode(SQLiteError.ResultCode.readOnly)
            /// `SQLITE_IOERR`: the operating system reported an I/O error.
            public static let ioError = ResultCode(SQLiteError.ResultCode.ioError)
            /// `SQLITE_CORRUPT`: the database file is damaged.
            public static let corrupt = ResultCode(SQLiteError.ResultCode.corrupt)
            /// `SQLITE_FULL`: the disk (or the file size limit) is full.
            public static let full = ResultCode(SQLiteError.ResultCode.full)
            /// `SQLITE_CANTOPEN`: the file could not be opened.
            public static let cantOpen = ResultCode(SQLiteError.ResultCode.cantOpen)
            /// `SQLITE_CONSTRAINT`: a row broke a constraint of the schema.
            public static let constraint = ResultCode(SQLiteError.ResultCode.constraint)
            /// `SQLITE_NOTADB`: the file is not a SQLite database.
            public static let notADatabase = ResultCode(SQLiteError.ResultCode.notADatabase)
            /// `SQLITE_TOOBIG`: a value is larger than SQLite allows.
            public static let tooBig = ResultCode(SQLiteError.ResultCode.tooBig)

            init(_ code: SQLiteError.ResultCode) { rawValue = code.rawValue }

            /// SQLite's English description of the code (`database or disk is full`).
            public var description: String { SQLiteError.ResultCode(rawValue: rawValue).description }
        }

        /// The primary result code.
        public var resultCode: ResultCode { ResultCode(error.resultCode) }
        /// The extended result code, as `sqlite3_extended_errcode` returned it.
        public var extendedResultCode: Int32 { error.extendedResultCode }
        /// SQLite's own message.
        public var message: String { error.message }
        /// The statement that failed, if any. Bound values are never included.
        public var sql: String? { error.sql }

        /// The storage layer's error, which this one shows.
        let error: SQLiteError

        init(_ error: SQLiteError) { self.error = error }

        /// The codes, SQLite's message and the statement, for logs.
        public var description: String { error.description }
    }
}
