import Foundation

/// Checks of the database file itself, made before SQLite opens it.
package enum DatabaseFileCheck {
    /// Throws ``StorageError/damaged(path:reason:)`` when the file ends in
    /// the middle of a page: it was cut short (a copy interrupted, a disk
    /// that lost its tail), and SQLite would read the missing part as zeros
    /// without a word — rows past the cut would come back empty or as
    /// garbage.
    ///
    /// SQLite writes a database file in whole pages, and so does a
    /// checkpoint. Only a file with no WAL in use is judged: while a WAL holds
    /// pages, a checkpoint in another process may be extending the file, and
    /// the WAL's copy of the last page is the one SQLite reads anyway. A size
    /// that looks cut short is read again twice, a millisecond apart, before
    /// it counts.
    package static func checkWholePages(_ path: String) throws {
        guard let pageSize = pageSize(path), !walInUse(path) else { return }
        var remainder = 0
        var size = 0
        for attempt in 0..<3 {
            guard let current = fileSize(path) else { return }
            size = current
            remainder = size % pageSize
            guard remainder != 0 else { return }
            if attempt < 2 { usleep(1_000) }
        }
        throw StorageError.damaged(
            path: path,
            reason:
                "the file ends \(remainder) bytes into a page of \(pageSize) bytes (\(size) bytes in all): it was cut short"
        )
    }

    /// The page size a SQLite header declares, or nil when there is no
    /// readable SQLite header (a new or empty file, or not a database:
    /// SQLite reports that itself).
    static func pageSize(_ path: String) -> Int? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var header = [UInt8](repeating: 0, count: 100)
        guard pread(fd, &header, 100, 0) == 100, header.prefix(16).elementsEqual("SQLite format 3\0".utf8) else {
            return nil
        }
        let raw = Int(header[16]) << 8 | Int(header[17])
        let size = raw == 1 ? 65_536 : raw
        guard size >= 512, size <= 65_536, size & (size - 1) == 0 else { return nil }
        return size
    }

    /// Whether a WAL with frames sits beside the database.
    static func walInUse(_ path: String) -> Bool {
        (fileSize(path + "-wal") ?? 0) > 0
    }

    /// The file's size in bytes, or nil when it cannot be opened. (Seeking
    /// to the end, not `stat`: no file metadata is read.)
    static func fileSize(_ path: String) -> Int? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        let end = lseek(fd, 0, SEEK_END)
        return end < 0 ? nil : Int(end)
    }
}
