/// How much a commit survives.
public enum SynchronousMode: String, Sendable, Hashable, Codable {
    /// `PRAGMA synchronous = NORMAL` in WAL mode: a committed event survives the
    /// app crashing or being killed; the last commits before a power cut or OS
    /// crash can be lost (the database stays consistent). The default.
    case normal
    /// `PRAGMA synchronous = FULL`: every commit is fsynced, so it also survives
    /// a power cut, at the cost of one fdatasync per transaction (group commit
    /// shares it between all events in the transaction).
    case full
}
