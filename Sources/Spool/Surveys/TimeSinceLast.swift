import Foundation

/// "The last occurrence of event X was at least / at most N seconds ago."
///
/// Read over the history up to the evaluation (at an event: without the
/// events after it in the log). When the event never occurred (in what the
/// history keeps), ``Comparison/atLeast`` holds and ``Comparison/atMost``
/// does not.
///
/// ```swift
/// TimeSinceLast("app_opened", .atLeast, 7 * 86_400)   // not opened for a week
/// ```
public struct TimeSinceLast: Sendable, Hashable {
    /// How the time since the last occurrence compares with `seconds`.
    public enum Comparison: Sendable, Hashable {
        /// At least `seconds` ago, or never.
        case atLeast
        /// At most `seconds` ago.
        case atMost
    }

    /// The event whose last occurrence is measured.
    let eventName: String
    /// How the time compares with `seconds`.
    let comparison: Comparison
    /// The time compared against, in seconds; must not be negative.
    let seconds: TimeInterval

    /// A condition on how long ago `eventName` last occurred.
    public init(_ eventName: String, _ comparison: Comparison, _ seconds: TimeInterval) {
        self.eventName = eventName
        self.comparison = comparison
        self.seconds = seconds
    }

    /// True when `elapsed` (nil: never) satisfies the comparison.
    func holds(for elapsed: TimeInterval?) -> Bool {
        guard let elapsed else { return comparison == .atLeast }
        switch comparison {
        case .atLeast: return elapsed >= seconds
        case .atMost: return elapsed <= seconds
        }
    }
}
