import Foundation

/// A string compared and hashed by its UTF-8 bytes, as SQLite compares
/// text. Swift's own equality takes canonically equivalent spellings as one
/// string ("é" as one scalar, or as "e" and a combining accent), while the
/// history keeps and counts each spelling apart.
package struct Bytewise: Hashable, Sendable {
    package let string: String

    @inlinable package init(_ string: String) {
        self.string = string
    }

    @inlinable package static func == (left: Bytewise, right: Bytewise) -> Bool {
        same(left.string, right.string)
    }

    /// Swift's own hash: strings with the same bytes are equal to Swift
    /// too, so they hash alike.
    @inlinable package func hash(into hasher: inout Hasher) {
        string.hash(into: &hasher)
    }

    /// Whether `left` and `right` have the same UTF-8 bytes.
    @inlinable package static func same(_ left: String, _ right: String) -> Bool {
        let (left, right) = (left.utf8, right.utf8)
        guard left.count == right.count else { return false }
        let compared = left.withContiguousStorageIfAvailable { left in
            right.withContiguousStorageIfAvailable { right in
                left.isEmpty || memcmp(left.baseAddress!, right.baseAddress!, left.count) == 0
            }
        }
        return (compared ?? nil) ?? left.elementsEqual(right)
    }
}
