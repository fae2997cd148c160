import SpoolStorage

/// For hosts that cannot observe the app lifecycle (a watchOS extension
/// delegate, a command-line tool): forwards to every started engine.
///
/// ```swift
/// func applicationDidEnterBackground() {          // WKApplicationDelegate
///     SpoolBackgroundNotifier.applicationDidEnterBackground()
/// }
/// ```
///
/// Engines are held weakly; an engine joins when it starts (once, however
/// often `start()` is retried). Both calls return at once, from any thread:
/// entering the background uploads what waits and then suspends each
/// engine's database; becoming active resumes it.
public enum SpoolBackgroundNotifier {
    private static let engines = Protected<[WeakBox<EventEngine>]>([])

    static func register(_ engine: EventEngine) {
        engines.withLock { entries in
            entries.removeAll { $0.object == nil || $0.object === engine }
            entries.append(WeakBox(engine))
        }
    }

    /// How many times `engine` is registered (a retried start registers once).
    static func registrations(of engine: EventEngine) -> Int {
        engines.withLock { $0.filter { $0.object === engine }.count }
    }

    private static var live: [EventEngine] {
        engines.withLock { $0.compactMap(\.object) }
    }

    /// The app moved to the background: every engine uploads what is queued
    /// and then stops touching its database file, as
    /// ``EventEngine/applicationDidEnterBackground()`` does.
    public static func applicationDidEnterBackground() {
        for engine in live { engine.applicationDidEnterBackground() }
    }

    /// The app is active again: every engine touches its database file
    /// again and uploads what is due, as
    /// ``EventEngine/applicationDidBecomeActive()`` does.
    public static func applicationDidBecomeActive() {
        for engine in live { engine.applicationDidBecomeActive() }
    }
}
