import SpoolStorage

/// An error reported by SQLite: its result code, its message and the SQL that
/// failed — never the bound values, which can be personal data.
///
/// Match on its `resultCode` (`.full`, `.busy`, `.ioError`…) to tell a full
/// disk from a locked file; `extendedResultCode` is SQLite's extended code,
/// `message` SQLite's own text, and `sql` the statement that failed.
///
/// ```swift
/// do {
///     try await engine.recordDurably("checkout_done")
/// } catch SpoolError.stillBuffered(_, let reason) where reason.resultCode == .full {
///     // The disk is full: the event is kept in memory and committed later.
/// }
/// ```
///
/// ``EventEngine/recordDurably(_:parameters:)`` throws it only when the
/// database refused that one event for good (a constraint, a value too big);
/// a failure of the database as a whole is
/// ``SpoolError/stillBuffered(eventID:reason:)`` instead, and the event is
/// kept. ``EventEngine/start()`` throws it when SQLite fails while opening.
public typealias SQLiteError = SpoolStorage.SQLiteError
