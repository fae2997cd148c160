import Foundation
import SpoolStorage

/// One event on its way through the middleware, before it is encoded and
/// stored: what a middleware may read and change.
public struct PipelineEvent: Sendable, Hashable {
    /// The event name (for a `screen`, the screen's name). A middleware may
    /// rename it; the new name is validated like any other.
    public var name: String
    /// The parameters (a `screen`'s properties, an `identify`'s or `group`'s
    /// traits). A middleware may add, change or remove any.
    public var parameters: [String: EventValue]
    /// The message type; fixed.
    public let type: EventType

    /// An event as `record` received it.
    public init(name: String, parameters: [String: EventValue], type: EventType = .track) {
        self.name = name
        self.parameters = parameters
        self.type = type
    }
}

/// What a middleware decided for one event.
public enum MiddlewareDecision: Sendable, Hashable {
    /// The event goes on, with whatever the middleware changed.
    case keep
    /// The event is not stored; `record` returns
    /// ``RecordOutcome/droppedByMiddleware(reason:)`` with `reason`.
    case drop(reason: String)
}

/// A step every event passes, on the caller's thread, before it is encoded:
/// enrich it, scrub it or drop it. See ``EventEngine/addMiddleware(_:)``.
///
/// A middleware that throws drops the event: it is reported as
/// ``SpoolDiagnostic/Kind-swift.enum/middlewareFailed`` and never stored, so
/// a failing scrubber cannot let the unscrubbed event through.
public typealias Middleware = @Sendable (_ event: inout PipelineEvent) throws -> MiddlewareDecision

/// The engine's middleware, in the order they were added.
final class Pipeline: Sendable {
    private struct Entry: Sendable {
        let id: UInt64
        let middleware: Middleware
    }

    private let entries = Protected<(next: UInt64, list: [Entry])>((1, []))

    func add(_ middleware: @escaping Middleware) -> Registration {
        let id = entries.withLock { entries in
            defer { entries.next += 1 }
            entries.list.append(Entry(id: entries.next, middleware: middleware))
            return entries.next
        }
        return Registration(id: id) { [weak self] in
            self?.entries.withLock { $0.list.removeAll { $0.id == id } }
        }
    }

    /// What the middleware did to one event.
    enum Outcome {
        case keep(PipelineEvent)
        case drop(reason: String)
        case failed(any Error)
    }

    /// Runs every middleware over `event`, in order, stopping at the first
    /// drop or error. Nil: there is no middleware (the event is unchanged).
    func run(_ event: @autoclosure () -> PipelineEvent) -> Outcome? {
        // A snapshot: middleware added or removed meanwhile applies from the
        // next event on.
        let list = entries.withLock { $0.list }
        guard !list.isEmpty else { return nil }
        var event = event()
        for entry in list {
            do {
                if case .drop(let reason) = try entry.middleware(&event) { return .drop(reason: reason) }
            } catch {
                return .failed(error)
            }
        }
        return .keep(event)
    }
}
