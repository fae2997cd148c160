/// A property value the history keeps beside an occurrence, for survey
/// filters (`event_history_values`, migration 0013): what SQLite stores in
/// the `value` column.
package enum HistoryValue: Sendable, Hashable {
    case integer(Int64)
    case real(Double)
    case text(String)

    /// The value as a number, for the numeric comparisons; nil for text.
    package var number: Double? {
        switch self {
        case .integer(let value): Double(value)
        case .real(let value): value
        case .text: nil
        }
    }

    /// Equality as SQLite's index sees it: numbers by value (an integer
    /// equals the real with the same value), text by its bytes.
    package func matches(_ other: HistoryValue) -> Bool {
        switch (self, other) {
        case (.text(let left), .text(let right)): return left.utf8.elementsEqual(right.utf8)
        case (.integer(let left), .integer(let right)): return left == right
        case (.real(let left), .real(let right)): return left == right
        case (.integer(let integer), .real(let real)), (.real(let real), .integer(let integer)):
            return Int64(exactly: real) == integer
        default: return false
        }
    }

    /// Binds the value at `index` of `statement`.
    func bind(to statement: Statement, at index: Int32) throws {
        switch self {
        case .integer(let value): try statement.bind(value, at: index)
        case .real(let value): try statement.bind(value, at: index)
        case .text(let value): try statement.bind(value, at: index)
        }
    }
}

/// The declared properties of one recorded event, with their values: what
/// the writer adds to `event_history_values` with its occurrence.
package struct HistoryValues: Sendable, Hashable {
    /// One property and its value.
    package struct Entry: Sendable, Hashable {
        package let property: String
        package let value: HistoryValue

        package init(_ property: String, _ value: HistoryValue) {
            self.property = property
            self.value = value
        }
    }

    package let entries: [Entry]

    package init(_ entries: [Entry]) {
        self.entries = entries
    }

    /// The value kept for `property`, if the event had one.
    package func value(of property: String) -> HistoryValue? {
        entries.first { $0.property == property }?.value
    }
}
