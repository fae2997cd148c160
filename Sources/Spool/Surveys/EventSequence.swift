import Foundation

/// "Event A, then event B within a window, and (optionally) no event C in
/// the window after B."
///
/// Holds when an occurrence of `second` came in the same millisecond as an
/// occurrence of `first` or after it, no more than `gap` later (with
/// ``EventFrequency/Window/thisSession``: both in the current session), and
/// that occurrence of `second` lies in `window`. With an absence
/// (``notFollowed(by:within:)``), the
/// absent event must not have occurred in the milliseconds after that
/// `second` up to the absence's window: which can only be known once that
/// window has passed, so such a rule holds from the first evaluation at
/// least that long after `second` (a later event's trigger, or
/// ``SurveyCenter/explain(surveyID:)``), never at `second` itself.
///
/// Read over the history in time order, up to the evaluation (at an event:
/// up to its time, without the events after it in the log), to the
/// millisecond.
///
/// ```swift
/// // Added to cart, left checkout within 10 minutes, no purchase in the 10 minutes after.
/// EventSequence("cart_added", then: "checkout_left", within: .minutes(10))
///     .notFollowed(by: "purchase", within: .minutes(10))
/// ```
public struct EventSequence: Sendable, Hashable {
    /// An event that must not follow the sequence's `second`.
    struct Absence: Sendable, Hashable {
        /// The event that must not occur.
        let eventName: String
        /// How long after `second` it must not occur: `.last(seconds:)`.
        let within: EventFrequency.Window
    }

    /// The event that comes first.
    let first: String
    /// The event that follows it.
    let second: String
    /// How long after `first` the `second` may come: `.last(seconds:)`, or
    /// `.thisSession` for both in the current session; `.ever` is refused
    /// (``SpoolError/SurveyProblem/sequenceWithoutWindow(surveyID:)``).
    let gap: EventFrequency.Window
    /// Where `second` must lie: everything the history keeps (`.ever`, the
    /// default), the last N seconds, or this session.
    let window: EventFrequency.Window
    /// The event that must not follow `second`, if any.
    let absence: Absence?

    /// `first`, then `second` no more than `gap` later, with `second` in
    /// `window`.
    public init(
        _ first: String, then second: String, within gap: EventFrequency.Window,
        in window: EventFrequency.Window = .ever
    ) {
        self.init(first, second, gap, window, absence: nil)
    }

    private init(
        _ first: String, _ second: String, _ gap: EventFrequency.Window, _ window: EventFrequency.Window,
        absence: Absence?
    ) {
        self.first = first
        self.second = second
        self.gap = gap
        self.window = window
        self.absence = absence
    }

    /// The same sequence, holding only when `eventName` did not occur in
    /// the `within` (`.last(seconds:)`) after `second`.
    public func notFollowed(by eventName: String, within: EventFrequency.Window) -> EventSequence {
        EventSequence(first, second, gap, window, absence: Absence(eventName: eventName, within: within))
    }
}
