import Foundation
import Testing

@testable import SpoolStorage

/// The middle leaf of `events` of a queue file, in key order, found in an
/// undamaged copy: which rows live on it, and where its cells are.
struct DamagedPage {
    let number: Int
    /// The rows on it, as indices of the log in seq order.
    let rows: Range<Int>
    /// The offsets of its cells in the page, in rowid order.
    let cells: [Int]
    let head: Int64
    /// The page as it was before any damage.
    let undamagedBytes: [UInt8]

    init(undamaged path: String) throws {
        // The leaves of the events table in key order (dbstat's path), each
        // with its rows: the rows before this page are the leaves before it.
        let leaves = try DamagedFiles.cli(
            path, "SELECT pageno || ' ' || ncell FROM dbstat WHERE name = 'events' AND pagetype = 'leaf' ORDER BY path"
        ).split(separator: "\n").map { $0.split(separator: " ").compactMap { Int($0) } }
        try #require(leaves.count >= 3, "events spans several leaves")
        let index = leaves.count / 2
        let number = leaves[index][0]
        self.number = number
        let before = leaves[..<index].reduce(0) { $0 + $1[1] }
        rows = before..<before + leaves[index][1]
        head = try #require(Int64(try DamagedFiles.cli(path, "SELECT last_seq FROM log_head")))
        let bytes = try Self.bytes(of: number, in: path)
        let cellCount = Int(bytes[3]) << 8 | Int(bytes[4])
        try #require(cellCount == rows.count)
        cells = (0..<cellCount).map { Int(bytes[8 + 2 * $0]) << 8 | Int(bytes[9 + 2 * $0]) }
        undamagedBytes = bytes
    }

    static func bytes(of page: Int, in path: String) throws -> [UInt8] {
        let handle = try #require(FileHandle(forReadingAtPath: path))
        defer { try? handle.close() }  // try?: a read-only handle; nothing to lose
        try handle.seek(toOffset: UInt64((page - 1) * Connection.newFilePageSize))
        return [UInt8](try #require(try handle.read(upToCount: Connection.newFilePageSize)))
    }

    /// Overwrites 8,000 bytes 100 bytes into the page with garbage; with
    /// `readThrough`, the first cell in that garbage is a well-formed one
    /// whose rowid is past the head (garbage SQLite reads as a row).
    func damage(_ path: String, readThrough: Bool) throws {
        var garbage = [UInt8](DamagedFiles.garbage(8_000))
        if readThrough {
            let first = try #require(cells.first { (100..<8_000).contains($0) }, "a cell in the garbage")
            let cell = Self.minimalCell(rowid: UInt64(head) + 1_000_000)
            garbage.replaceSubrange((first - 100)..<(first - 100 + cell.count), with: cell)
        }
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        try handle.seek(toOffset: UInt64((number - 1) * Connection.newFilePageSize + 100))
        try handle.write(contentsOf: Data(garbage))
        try handle.close()
    }

    /// The first cell, in rowid order, that ``damage(_:readThrough:)``'s
    /// garbage reaches: the cells before it are intact.
    var firstDamagedCell: Int? { cells.firstIndex { $0 < 8_100 } }

    /// The rowid of the cell at `index` in rowid order, from the undamaged page.
    func rowid(ofCell index: Int) -> UInt64 {
        var offset = cells[index]
        _ = Self.readVarint(undamagedBytes, &offset)  // the payload's size
        return Self.readVarint(undamagedBytes, &offset)
    }

    /// Damages the page as ``damage(_:readThrough:)`` does (without the
    /// read-through cell), then points ``firstDamagedCell`` at `cell`,
    /// written into the garbage: a read stepping onto the page meets `cell`
    /// right after the intact ones.
    func damage(_ path: String, planting cell: [UInt8]) throws {
        try damage(path, readThrough: false)
        let index = try #require(firstDamagedCell, "a cell in the garbage")
        let at = 200
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }  // try?: the writes below have thrown or succeeded
        let start = UInt64((number - 1) * Connection.newFilePageSize)
        try handle.seek(toOffset: start + UInt64(at))
        try handle.write(contentsOf: Data(cell))
        try handle.seek(toOffset: start + UInt64(8 + 2 * index))
        try handle.write(contentsOf: Data([UInt8(at >> 8), UInt8(at & 0xff)]))
    }

    /// A well-formed cell with `rowid` whose `id` claims 1.5 GB: past
    /// SQLite's length limit, so reading it fails with SQLITE_TOOBIG rather
    /// than SQLITE_CORRUPT.
    static func overlongCell(rowid: UInt64) -> [UInt8] {
        // The part of the payload stored on the page is what SQLite's
        // b-tree rule gives a 16 KiB page.
        let payload: UInt64 = 1_500_000_000
        let usable = UInt64(Connection.newFilePageSize)
        let minLocal = (usable - 12) * 32 / 255 - 23
        var local = minLocal + (payload - minLocal) % (usable - 4)
        if local > usable - 35 { local = minLocal }
        let idType = varint((payload - 7) * 2 + 13)  // a text of payload − header bytes
        let header = [UInt8(2 + idType.count), 0] + idType  // seq is the rowid: NULL in the record
        let cell = varint(payload) + varint(rowid) + header
        return cell + [UInt8](repeating: 0, count: Int(local) - header.count) + [0, 0, 0, 2]  // the first overflow page
    }

    /// A well-formed cell with `rowid` and a record of one NULL column.
    static func minimalCell(rowid: UInt64) -> [UInt8] {
        [UInt8(2)] + varint(rowid) + [2, 0]
    }

    /// SQLite's variable-length integer at `offset` (up to 8 bytes of 7 bits
    /// here), moving `offset` past it.
    static func readVarint(_ bytes: [UInt8], _ offset: inout Int) -> UInt64 {
        var value: UInt64 = 0
        repeat {
            value = value << 7 | UInt64(bytes[offset] & 0x7f)
            offset += 1
        } while bytes[offset - 1] & 0x80 != 0
        return value
    }

    /// SQLite's variable-length integer (up to 8 bytes of 7 bits here).
    static func varint(_ value: UInt64) -> [UInt8] {
        var groups: [UInt8] = []
        var rest = value
        repeat {
            groups.insert(UInt8(rest & 0x7f), at: 0)
            rest >>= 7
        } while rest > 0
        return groups.enumerated().map { $0.offset < groups.count - 1 ? $0.element | 0x80 : $0.element }
    }
}
