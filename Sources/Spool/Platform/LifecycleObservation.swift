import Foundation

#if canImport(UIKit) && !os(watchOS)
    import UIKit
#elseif canImport(AppKit)
    import AppKit
#endif

/// The platform's app-lifecycle notifications an engine reacts to, and the
/// observer tokens it holds while started (removed at `close()`).
enum LifecycleObservation {
    /// What an engine does for a notification.
    enum Reaction {
        /// The app (or extension) is going to the background: upload what
        /// waits, then stop touching the database file.
        case background
        /// The app is active again: touch the file again, upload what is due.
        case foreground
        /// No suspension is coming (macOS): upload what waits.
        case flush
    }

    /// The notifications observed on this platform.
    static var notifications: [(Notification.Name, Reaction)] {
        var names: [(Notification.Name, Reaction)] = []
        #if canImport(UIKit) && !os(watchOS)
            // iOS, tvOS, visionOS apps.
            names += [
                (UIApplication.didEnterBackgroundNotification, .background),
                (UIApplication.willEnterForegroundNotification, .foreground),
                (UIApplication.didBecomeActiveNotification, .foreground),
            ]
        #elseif canImport(AppKit)
            // macOS does not suspend apps holding a file lock: upload when the
            // app steps back or quits.
            names += [
                (NSApplication.didResignActiveNotification, .flush),
                (NSApplication.willTerminateNotification, .flush),
            ]
        #endif
        #if os(iOS) || os(tvOS) || os(visionOS)
            // App extensions: their host's lifecycle (an extension cannot reach
            // UIApplication.shared, and has only seconds in the background).
            names += [
                (Notification.Name.NSExtensionHostDidEnterBackground, .background),
                (Notification.Name.NSExtensionHostWillEnterForeground, .foreground),
                (Notification.Name.NSExtensionHostDidBecomeActive, .foreground),
            ]
        #endif
        return names
    }

    /// Observes every notification for `engine` (held weakly) and returns
    /// the tokens to remove later.
    static func observe(_ engine: EventEngine) -> [any NSObjectProtocol] {
        notifications.map { name, reaction in
            NotificationCenter.default.addObserver(forName: name, object: nil, queue: nil) { [weak engine] _ in
                switch reaction {
                case .background: engine?.applicationDidEnterBackground()
                case .foreground: engine?.applicationDidBecomeActive()
                case .flush: engine?.uploaderBox.withLock { $0 }?.requestFlushFromAnyThread()
                }
            }
        }
    }

    static func remove(_ tokens: [any NSObjectProtocol]) {
        for token in tokens { NotificationCenter.default.removeObserver(token) }
    }
}
