/// Where a ``DefaultEventDispatcher`` keeps its queue.
public enum DataStoreType: Sendable, Hashable {
    /// A SQLite file named by `dataStoreName` (`<directory>/<name>.sqlite`):
    /// survives crashes and restarts. The default.
    case file
    /// An in-memory SQLite database: queued events are lost when the process ends.
    case memory
    /// Accepted for compatibility with code written for other SDKs. Spool keeps
    /// no queue in `UserDefaults` (a property list rewritten on every event costs
    /// time in proportion to the queue and is not crash-safe): it maps to
    /// `.file` with the same name.
    case userDefaults
}
