import SpoolStorage

/// An error reported by SQLite: its result code, its message and the SQL that
/// failed — never the bound values, which can be personal data.
///
/// Match on ``SQLiteError/resultCode`` (`.full`, `.busy`, `.ioError`…) to
/// tell a full disk from a locked file.
public typealias SQLiteError = SpoolStorage.SQLiteError
