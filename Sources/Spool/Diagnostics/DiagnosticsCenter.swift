import Foundation
import SpoolStorage

/// Where every component reports what it could not return to a caller.
///
/// Counts are updated at once; the configured handler and the
/// ``EventEngine/diagnostics()`` streams are called on the delivery queue, in
/// order with the events listeners receive, never under a lock.
final class DiagnosticsCenter: Sendable {
    private let handler: (@Sendable (SpoolDiagnostic) -> Void)?
    private let queue: DispatchQueue
    /// What each diagnostic's ``SpoolDiagnostic/date`` is read from.
    private let clock: any SpoolClock
    private let counts = Protected(DiagnosticCounts())
    private let streams = SubscriptionRegistry<AllDiagnostics, SpoolDiagnostic>()

    private struct AllDiagnostics: Hashable, Sendable {}

    init(handler: (@Sendable (SpoolDiagnostic) -> Void)?, queue: DispatchQueue, clock: any SpoolClock) {
        self.handler = handler
        self.queue = queue
        self.clock = clock
    }

    func report(_ diagnostic: SpoolDiagnostic) {
        report(diagnostic.kind, eventCount: diagnostic.eventCount) { diagnostic }
    }

    /// Counts a diagnostic; its message is only written when a handler or
    /// a stream will read it (a middleware that samples events out reports
    /// one per dropped event).
    func report(
        _ kind: SpoolDiagnostic.Kind, eventCount: Int = 0, error: (any Error)? = nil,
        _ message: @autoclosure () -> String
    ) {
        report(kind, eventCount: eventCount) {
            SpoolDiagnostic(
                kind, eventCount: eventCount, error: error, message(), date: Date(timeIntervalSince1970: clock.now))
        }
    }

    private func report(_ kind: SpoolDiagnostic.Kind, eventCount: Int, _ diagnostic: () -> SpoolDiagnostic) {
        counts.withLock { $0.add(kind, eventCount: eventCount) }
        guard isHeard else { return }
        let diagnostic = diagnostic()
        queue.async { [handler, streams] in
            handler?(diagnostic)
            streams.send(diagnostic, to: AllDiagnostics())
        }
    }

    /// Whether a handler or a stream reads diagnostics: without either,
    /// reporting one only counts it, with no hop to the delivery queue. A
    /// stream opened from now on gets the diagnostics from now on.
    private var isHeard: Bool { handler != nil || !streams.isEmpty }

    var snapshot: DiagnosticCounts { counts.withLock { $0 } }

    func stream() -> AsyncStream<SpoolDiagnostic> {
        streams.stream(AllDiagnostics())
    }

    func finishAll() {
        streams.finishAll()
    }
}

extension DiagnosticsCenter {
    /// What the event log could not tell a caller.
    func report(_ failure: EventLog.Failure) {
        switch failure {
        case .commitFailed(let error, let buffered):
            report(
                .commitFailed, eventCount: buffered, error: error,
                "a commit failed; \(buffered) events stay buffered and are retried")
        case .commitRecovered(let failures):
            report(.commitRecovered, "commits succeed again after \(failures) failed attempts")
        case .rowRejected(let error):
            report(.eventRejected, eventCount: 1, error: error, "the database refused one event; it is not stored")
        case .shrinkFailed(let error):
            report(.fileNotShrunk, error: error, "the database file could not give space back after a drain")
        case .eventsDropped(let drops):
            var bounds: [String] = []
            if drops.count > 0 { bounds.append("\(drops.count) over the count bound") }
            if drops.bytes > 0 { bounds.append("\(drops.bytes) over the byte bound") }
            if drops.age > 0 { bounds.append("\(drops.age) over the age bound") }
            report(
                .eventsDropped, eventCount: drops.total,
                "the queue's bounds dropped its oldest events before every consumer had them: "
                    + bounds.joined(separator: ", "))
        case .appendRefused:
            report(.recordRefused, eventCount: 1, "an event was refused: the buffer is full while commits fail")
        }
    }
}
