/// The history's unit of time: one row of `event_history` counts the
/// occurrences of one event name within one millisecond (migration 0005).
///
/// Migration 0005 computes the same millisecond in SQL for the rows it
/// merges (`CAST` truncates toward zero; one is taken off below zero); a
/// test checks that both agree.
package enum HistoryMillisecond {
    /// The millisecond `seconds` falls in, as seconds since 1970: never later
    /// than `seconds`.
    package static func of(_ seconds: Double) -> Double {
        (seconds * 1000).rounded(.down) / 1000
    }

    /// Adds ?3 occurrences of the name ?1 to the millisecond ?2.
    static let addSQL = """
        INSERT INTO event_history (name, recorded_at, occurrences) VALUES (?, ?, ?) \
        ON CONFLICT (name, recorded_at) DO UPDATE SET occurrences = occurrences + excluded.occurrences
        """
}
