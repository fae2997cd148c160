/// What an `on(_:_:)` registration or a stream listens to.
///
/// A string literal is a topic for that event name:
/// `engine.on("purchase") { … }` is `engine.on(.named("purchase")) { … }`.
/// The survey lifecycle events have topics of their own, such as
/// ``survey(_:)``.
public struct EventTopic: Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    enum Kind: Hashable, Sendable {
        case named(String)
        case everyEvent
        case ready
    }

    let kind: Kind

    /// Events with this name.
    public static func named(_ name: String) -> EventTopic { EventTopic(kind: .named(name)) }
    /// Every delivered event.
    public static let everyEvent = EventTopic(kind: .everyEvent)
    /// Fires once when `start()` settles; replayed at once to late subscribers.
    public static let ready = EventTopic(kind: .ready)

    /// The topic for events named `name`, as ``named(_:)``.
    public init(stringLiteral name: String) {
        kind = .named(name)
    }

    init(kind: Kind) {
        self.kind = kind
    }

    /// The event name, or `<every event>` / `<ready>`.
    public var description: String {
        switch kind {
        case .named(let name): return name
        case .everyEvent: return "<every event>"
        case .ready: return "<ready>"
        }
    }
}
