import Foundation
import SpoolStorage

/// Where an engine's database lives.
public enum DatabaseLocation: Sendable, Hashable {
    /// A file on disk (created with mode 0600 if missing). The `-wal` and
    /// `-shm` files SQLite keeps beside it share its directory.
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
