/// A string compared and hashed by its UTF-8 bytes, as SQLite compares
/// text. Swift's own equality takes canonically equivalent spellings as one
/// string ("é" as one scalar, or as "e" and a combining accent), while the
/// history keeps and counts each spelling apart.
package struct Bytewise: Hashable, Sendable {
    package let string: String

    package init(_ string: String) {
        self.string = string
    }

    package static func == (left: Bytewise, right: Bytewise) -> Bool {
        left.string.utf8.elementsEqual(right.string.utf8)
    }

    package func hash(into hasher: inout Hasher) {
        var string = string
        string.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
    }
}
