import Foundation

/// "Event X occurred at least / at most / exactly N times in the last D
/// seconds (or ever)." Survey lifecycle events count like any other (S3).
public struct EventFrequency: Sendable, Hashable {
    public enum Comparison: Sendable, Hashable {
        case atLeast
        case atMost
        case exactly
    }

    public enum Window: Sendable, Hashable {
        case ever
        /// The last `seconds` seconds before the evaluation.
        case last(seconds: TimeInterval)

        /// The last `days` days.
        public static func days(_ days: Double) -> Window { .last(seconds: days * 86_400) }
    }

    public let eventName: String
    public let comparison: Comparison
    public let count: Int
    public let window: Window

    public init(_ eventName: String, _ comparison: Comparison, _ count: Int, in window: Window = .ever) {
        self.eventName = eventName
        self.comparison = comparison
        self.count = count
        self.window = window
    }

    /// True when `occurrences` satisfies the comparison.
    func holds(for occurrences: Int) -> Bool {
        switch comparison {
        case .atLeast: return occurrences >= count
        case .atMost: return occurrences <= count
        case .exactly: return occurrences == count
        }
    }
}
