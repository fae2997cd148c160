import Foundation

/// How much the volume holding a file can still take, as the platform counts
/// it for the app.
enum FreeSpace {
    /// Bytes the app can still write on the volume holding `path`'s
    /// directory, or nil when the platform does not say.
    static func available(at path: String) -> Int64? {
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent()
        #if canImport(Darwin)
            // The capacity for an important write: what the system would free
            // for it (purgeable space included), the figure Apple recommends
            // for deciding whether to write. Introduced in iOS 11, macOS
            // 10.13, tvOS 11 and watchOS 4, below every floor Spool supports,
            // so no #available is needed (the compiler would call it
            // redundant).
            do {
                let values = try directory.resourceValues(forKeys: [.volumeAvailableCapacityForImportantUsageKey])
                return values.volumeAvailableCapacityForImportantUsage
            } catch {
                return nil  // the volume does not say: treated as enough
            }
        #else
            var info = statvfs()
            guard statvfs(directory.path, &info) == 0 else { return nil }
            return Int64(info.f_bavail) * Int64(info.f_frsize)
        #endif
    }
}
