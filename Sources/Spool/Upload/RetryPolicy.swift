import Foundation
import SpoolStorage

/// When a failed upload is tried again.
///
/// Exponential backoff with jitter: attempt n waits
/// `min(maximumDelay, initialDelay × multiplier^(n-1))`, scaled by a random
/// factor in `jitter` so that many devices coming back online do not retry in
/// step. A `Retry-After` from a 429 or 503 replaces the computed delay (capped
/// at `maximumRetryAfter`).
public struct RetryPolicy: Sendable, Hashable {
    /// Seconds before the first retry. Default 1.
    public var initialDelay: TimeInterval
    /// The longest computed delay, in seconds. Default 300.
    public var maximumDelay: TimeInterval
    /// How much each delay grows over the previous one. Default 2.
    public var multiplier: Double
    /// The random factor range applied to each delay.
    public var jitter: ClosedRange<Double>
    /// The longest `Retry-After` Spool honours.
    public var maximumRetryAfter: TimeInterval

    /// A policy; negative values count as 0, a `maximumDelay` below
    /// `initialDelay` as `initialDelay`, a `multiplier` below 1 as 1.
    public init(
        initialDelay: TimeInterval = 1, maximumDelay: TimeInterval = 300, multiplier: Double = 2,
        jitter: ClosedRange<Double> = 0.5...1.0, maximumRetryAfter: TimeInterval = 3_600
    ) {
        self.initialDelay = max(0, initialDelay)
        self.maximumDelay = max(self.initialDelay, maximumDelay)
        self.multiplier = max(1, multiplier)
        self.jitter = max(0, jitter.lowerBound)...max(0, jitter.upperBound)
        self.maximumRetryAfter = max(0, maximumRetryAfter)
    }

    /// The delay before retry number `attempt` (1 for the first retry).
    func delay(attempt: Int, retryAfter: TimeInterval?, random: inout FastRandom) -> TimeInterval {
        if let retryAfter { return min(max(0, retryAfter), maximumRetryAfter) }
        let exponent = Double(max(0, attempt - 1))
        let base = min(maximumDelay, initialDelay * pow(multiplier, min(exponent, 64)))
        let unit = Double(random.next() >> 11) * 0x1p-53  // [0, 1), the same on 32-bit Int
        return base * (jitter.lowerBound + (jitter.upperBound - jitter.lowerBound) * unit)
    }
}
