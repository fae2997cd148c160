import Foundation

/// How many dead letters the database keeps, and for how long.
///
/// Dead letters are events the collector refused on their own while it
/// accepted their neighbours. They stay in `dead_letters` until the app puts
/// them back (``EventEngine/requeueDeadLetters(_:)``) or a bound removes
/// them: the oldest beyond ``maximumCount``, and any that failed more than
/// ``maximumAge`` ago. Each removal is counted in
/// ``UploadStatistics/deadLettersEvicted`` and the `counters` table.
public struct DeadLetterLimits: Sendable, Hashable {
    /// The most dead letters kept; the oldest give way. Nil: no bound.
    public var maximumCount: Int?
    /// How long a dead letter is kept after it failed, in seconds. Nil: no
    /// bound.
    public var maximumAge: TimeInterval?

    /// Bounds for dead letters; nil leaves that bound off. The defaults
    /// keep 10,000 dead letters, each for 30 days.
    public init(maximumCount: Int? = 10_000, maximumAge: TimeInterval? = 30 * 86_400) {
        self.maximumCount = maximumCount.map { max(0, $0) }
        self.maximumAge = maximumAge.map { max(0, $0) }
    }
}

/// Which dead letters ``EventEngine/requeueDeadLetters(_:)`` puts back.
public enum DeadLetterFilter: Sendable, Hashable {
    /// Every one.
    case all
    /// Those refused with this HTTP status (`nil` status: never sent, such
    /// as an event over a format's per-event limit, is not matched).
    case status(Int)
    /// Those whose reason contains this text (`"error_code 40403"`).
    case reasonContaining(String)
}
