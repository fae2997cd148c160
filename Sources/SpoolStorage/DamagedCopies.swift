import Foundation

/// The copies of damaged databases set aside beside the database, each with
/// its `-wal` and `-shm` (so `sqlite3` opens the copy as it was):
///
/// - `<stem>.damaged-<UTC date>.<ext>` — a Spool database whose readable rows
///   were copied into the fresh file. Only the last one is kept, and it is
///   deleted after the configured number of days (and by erasure): nothing
///   the app cannot get back goes with it.
/// - `<stem>.newer-<UTC date>.<ext>` — a Spool database whose schema is newer
///   than this library's (a newer version of the app wrote it): the rows of
///   the tables this version knows, in the columns it knows, were copied
///   into the fresh file. Kept like a damaged copy: it is Spool's own file
///   and holds the same events, so it shares the bound, the expiry and the
///   erasure.
/// - `<stem>.unrecognized-<UTC date>.<ext>` — a file in which Spool found no
///   schema of its own (not SQLite, unreadable, or someone else's database).
///   Nothing in it was copied, so it never expires; only an erasure
///   deletes it (it sat at the app's database path).
///
/// For `OPTEventQueue.sqlite`: `OPTEventQueue.damaged-20250601T101530Z.sqlite`.
package struct DamagedCopies: Sendable {
    package enum Kind: String, Sendable, CaseIterable {
        case damaged, newer, unrecognized

        /// Whether copies of this kind are Spool's own files, whose rows the
        /// fresh file holds: only the last one is kept, and it expires.
        package var expires: Bool { self != .unrecognized }
    }

    /// One copy: its database file's path.
    package struct Copy: Sendable, Hashable {
        package var path: String
        package var kind: Kind
        package var date: Date
    }

    package let databasePath: String
    private let directory: String
    private let stem: String
    /// The extension with its dot, or "".
    private let suffix: String

    /// The files SQLite may keep beside a database.
    package static let companions = ["", "-wal", "-shm", "-journal"]

    package init(databasePath: String) {
        self.databasePath = databasePath
        // Plain string work: Foundation's URL parsing cost more than the
        // directory listing at start().
        let slash = databasePath.lastIndex(of: "/")
        directory = slash.map { String(databasePath[..<$0]) } ?? "."
        let name = slash.map { String(databasePath[databasePath.index(after: $0)...]) } ?? databasePath
        if let dot = name.lastIndex(of: "."), dot != name.startIndex {
            stem = String(name[..<dot])
            suffix = String(name[dot...])
        } else {
            stem = name
            suffix = ""
        }
    }

    /// Where a fresh file is built before it takes the database's place.
    package var buildingPath: String {
        directory + "/" + stem + ".salvaging" + suffix
    }

    /// A free path for a copy of `kind` set aside at `date`.
    package func newPath(_ kind: Kind, at date: Date) -> String {
        let base = directory + "/" + stem + "." + kind.rawValue + "-" + Self.stamp(date)
        var candidate = base + suffix
        var number = 2
        while Self.companions.contains(where: { FileManager.default.fileExists(atPath: candidate + $0) }) {
            candidate = base + "-\(number)" + suffix
            number += 1
        }
        return candidate
    }

    /// The copies in the directory, oldest first.
    package func list() -> [Copy] {
        var copies: [Copy] = []
        for name in Self.names(in: directory) where name.hasPrefix(stem + ".") && name.hasSuffix(suffix) {
            for kind in Kind.allCases {
                let prefix = stem + "." + kind.rawValue + "-"
                guard name.hasPrefix(prefix) else { continue }
                let middle = name.dropFirst(prefix.count).dropLast(suffix.count)
                guard let date = Self.date(String(middle.prefix(16))),
                    middle.count == 16 || (middle.dropFirst(16).first == "-" && Int(middle.dropFirst(17)) != nil)
                else { continue }
                copies.append(Copy(path: directory + "/" + name, kind: kind, date: date))
            }
        }
        return copies.sorted { $0.date < $1.date }
    }

    /// The names in `directory` (readdir: a tenth of what Foundation's
    /// listing costs at `start()`); none when it cannot be read — opening
    /// the database there fails on its own.
    private static func names(in directory: String) -> [String] {
        guard let stream = opendir(directory) else { return [] }
        defer { closedir(stream) }
        var names: [String] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
                String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// Deletes the recognised copies (``Kind/damaged`` and ``Kind/newer``)
    /// set aside before `cutoff` (all when nil), except `keeping`, with their
    /// companions.
    ///
    /// - Returns: the database paths of the copies that could not be
    ///   deleted whole (a file of theirs is still there).
    @discardableResult
    package func deleteDamaged(before cutoff: Date?, keeping: String? = nil) -> [String] {
        list().filter { copy in
            guard copy.kind.expires, copy.path != keeping else { return false }
            if let cutoff, copy.date >= cutoff { return false }
            return !Self.delete(copy.path)
        }.map(\.path)
    }

    /// Deletes every copy set aside at the database's path, of every kind
    /// (an unrecognized file sat at the app's database path too, and may hold
    /// the same user's data), with their companions, and a salvage's
    /// half-built file (``buildingPath``: a process killed between the
    /// salvage's renames leaves it, and nothing opens it again): what an
    /// erasure does.
    ///
    /// - Returns: the paths of the files that could not be deleted.
    package func deleteAll() -> [String] {
        (list().map(\.path) + [buildingPath]).flatMap { path -> [String] in
            Self.delete(path)
            return Self.companions.map { path + $0 }.filter { FileManager.default.fileExists(atPath: $0) }
        }
    }

    /// Deletes a copy's database and companions; returns whether none is
    /// left (one that was not there counts as deleted).
    @discardableResult
    private static func delete(_ path: String) -> Bool {
        var whole = true
        for companion in companions where FileManager.default.fileExists(atPath: path + companion) {
            do {
                try FileManager.default.removeItem(atPath: path + companion)
            } catch {
                // Gone meanwhile (another process deleted it) is deleted.
                whole = whole && !FileManager.default.fileExists(atPath: path + companion)
            }
        }
        return whole
    }

    /// Moves a database and its companions from `source` to `target` (the
    /// companions first, the database last, so a database is never left
    /// without the WAL that completes it); puts back what moved when a
    /// rename fails.
    package func move(from source: String, to target: String) throws {
        var moved: [String] = []
        for companion in Self.companions.reversed()
        where companion.isEmpty || FileManager.default.fileExists(atPath: source + companion) {
            guard rename(source + companion, target + companion) == 0 else {
                let reason = String(cString: strerror(errno))
                for done in moved.reversed() { _ = rename(target + done, source + done) }
                throw StorageError.cannotOpen(path: source, reason: "could not move it aside: \(reason)")
            }
            moved.append(companion)
        }
    }

    /// Removes `path` and its companions: only ever a file this process
    /// built (``buildingPath``).
    package static func remove(built path: String) {
        for companion in companions {
            // Not there is fine: nothing else can fail that matters here.
            try? FileManager.default.removeItem(atPath: path + companion)
        }
    }

    // MARK: - Dates in names

    /// `20250601T101530Z`: UTC, sortable, legal in every file system.
    static func stamp(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(parts.tm_year + 1900)" + two(parts.tm_mon + 1) + two(parts.tm_mday) + "T" + two(parts.tm_hour)
            + two(parts.tm_min) + two(parts.tm_sec) + "Z"
    }

    static func date(_ stamp: String) -> Date? {
        let bytes = Array(stamp.utf8)
        guard bytes.count == 16, bytes[8] == UInt8(ascii: "T"), bytes[15] == UInt8(ascii: "Z") else { return nil }
        func number(_ range: Range<Int>) -> Int32? {
            var value: Int32 = 0
            for byte in bytes[range] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int32(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0..<4), let month = number(4..<6), let day = number(6..<8),
            let hour = number(9..<11), let minute = number(11..<13), let second = number(13..<15)
        else { return nil }
        var parts = tm()
        parts.tm_year = year - 1900
        parts.tm_mon = month - 1
        parts.tm_mday = day
        parts.tm_hour = hour
        parts.tm_min = minute
        parts.tm_sec = second
        return Date(timeIntervalSince1970: TimeInterval(timegm(&parts)))
    }
}
