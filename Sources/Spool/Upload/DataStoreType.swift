/// Where a ``DefaultEventDispatcher`` keeps its queue.
public enum DataStoreType: Sendable, Hashable {
    /// A SQLite file named by `dataStoreName` (`<directory>/<name>.sqlite`):
    /// survives crashes and restarts. The default.
    case file
    /// An in-memory SQLite database: queued events are lost when the process ends.
    case memory
    /// Accepted so that code written for other SDKs compiles, and deprecated
    /// because it does not do what it says: Spool keeps no queue in
    /// `UserDefaults` (a property list rewritten on every event costs time in
    /// proportion to the queue and is not crash-safe). It means `.file`, with
    /// the same name.
    @available(
        *, deprecated,
        message: "Spool keeps no queue in user defaults: this is .file, the SQLite file dataStoreName names. Use .file."
    )
    case userDefaults
}
