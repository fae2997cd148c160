import Foundation

/// The batching rules a dispatcher asks the engine's uploader to follow.
///
/// ``DefaultEventDispatcher`` adopts it; a custom dispatcher may too, and
/// otherwise gets `DefaultEventDispatcher`'s defaults.
public protocol BatchingPolicy: Sendable {
    /// Events per request (at least 1).
    var batchSize: Int { get }
    /// Seconds between timed flushes; 0 sends as soon as events are committed.
    var timerInterval: TimeInterval { get }
    /// The most events kept for upload; past it the oldest give way.
    var maxQueueSize: Int { get }
}
