import Foundation
import SpoolStorage

/// Where an engine's database lives.
public enum DatabaseLocation: Sendable, Hashable {
    /// A file on disk, created if missing, and its directory with its
    /// parents (``EventEngine/start()`` throws
    /// ``SpoolError/cannotOpen(path:reason:)`` when they cannot be made).
    ///
    /// The file and the `-wal` and `-shm` files SQLite keeps beside it are
    /// readable and writable by their owner only (mode 0600: an existing file
    /// is tightened when opened). A new file uses 16 KiB pages and
    /// incremental auto-vacuum, so it can give space back after the queue
    /// drains.
    case file(URL)
    /// A private in-memory database: nothing survives `close()`.
    case inMemory

    /// The path SQLite opens.
    var path: String {
        switch self {
        case .file(let url): return url.path
        case .inMemory: return Connection.inMemoryPath
        }
    }
}
