import Foundation

/// Checks of the database file itself, made before SQLite opens it.
package enum DatabaseFileCheck {
    /// Throws ``StorageError/damaged(path:reason:)`` when the file ends in
    /// the middle of a page that the WAL beside it does not hold: it was cut
    /// short (a copy interrupted, a disk that lost its tail), and SQLite
    /// would read the missing part as zeros without a word — rows past the
    /// cut would come back empty or as garbage, and uploads would stall
    /// without an error.
    ///
    /// SQLite writes a database file in whole pages, and so does a
    /// checkpoint. A page whose newest copy is in the WAL is read from there
    /// (and written whole by the next checkpoint), so a file ending in it is
    /// not damage: that is also what a checkpoint in another process looks
    /// like while it extends the file. A size that looks cut short is read
    /// again twice, a millisecond apart, before it counts.
    package static func checkWholePages(_ path: String) throws {
        guard let pageSize = pageSize(path) else { return }
        var remainder = 0
        var size = 0
        for attempt in 0..<3 {
            guard let current = fileSize(path) else { return }
            size = current
            remainder = size % pageSize
            guard remainder != 0, !walHolds(page: size / pageSize + 1, path + "-wal", pageSize: pageSize) else {
                return
            }
            if attempt < 2 { usleep(1_000) }  // clock-exempt: a real deadline, another process's checkpoint
        }
        throw StorageError.damaged(
            path: path,
            reason:
                "the file ends \(remainder) bytes into a page of \(pageSize) bytes (\(size) bytes in all): it was cut short"
        )
    }

    /// Whether the WAL at `walPath` holds a frame of page `page` (numbered
    /// from 1) written since it last started over: a frame whose salts are
    /// the WAL header's. Reads each frame's 24-byte header, only when a
    /// file looks cut short.
    static func walHolds(page: Int, _ walPath: String, pageSize: Int) -> Bool {
        let fd = open(walPath, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var header = [UInt8](repeating: 0, count: 32)
        guard pread(fd, &header, 32, 0) == 32, Self.bigEndian(header, 8) == pageSize else { return false }
        let salts = header[16..<24]
        var frame = [UInt8](repeating: 0, count: 24)
        var offset = 32
        while pread(fd, &frame, 24, off_t(offset)) == 24 {
            guard frame[8..<16].elementsEqual(salts) else { break }  // frames of an earlier round
            if Self.bigEndian(frame, 0) == page { return true }
            offset += 24 + pageSize
        }
        return false
    }

    /// The 32-bit big-endian number at `offset`.
    private static func bigEndian(_ bytes: [UInt8], _ offset: Int) -> Int {
        bytes[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) }
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
