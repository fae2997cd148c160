/// A property value the history keeps beside an occurrence, for survey
/// filters (`event_history_values`, migration 0013): what SQLite stores in
/// the `value` column.
package enum HistoryValue: Sendable, Hashable {
    case integer(Int64)
    case real(Double)
    case text(String)

    /// Whether the value is a number greater than `bound`, compared
    /// exactly: an integer is not rounded to a double first (past 2^53 it
    /// would be). False for text and for NaN.
    package func isGreater(than bound: Double) -> Bool {
        switch self {
        case .real(let value): return value > bound
        case .text: return false
        case .integer(let value):
            guard !bound.isNaN, bound < 0x1p63 else { return false }
            guard bound >= -0x1p63 else { return true }
            // Greater than `bound` exactly when greater than its floor.
            return value > Int64(bound.rounded(.down))
        }
    }

    /// Whether the value is a number less than `bound`, compared exactly
    /// (see ``isGreater(than:)``). False for text and for NaN.
    package func isLess(than bound: Double) -> Bool {
        switch self {
        case .real(let value): return value < bound
        case .text: return false
        case .integer(let value):
            guard !bound.isNaN, bound >= -0x1p63 else { return false }
            guard bound < 0x1p63 else { return true }
            let floor = bound.rounded(.down)
            return value < Int64(floor) || (value == Int64(floor) && bound != floor)
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
