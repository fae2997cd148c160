import Foundation

#if canImport(UIKit) && !os(watchOS)
    import UIKit
#elseif canImport(AppKit)
    import AppKit
#endif

/// The operating system itself: each call made as the platform's API
/// defines it, and nothing decided here (the engine decides, through
/// ``SpoolPlatform``, and the tests drive the same decisions on Linux).
final class SystemPlatform: SpoolPlatform {
    static let shared = SystemPlatform()

    // MARK: What the system is

    /// The operating system's name, as the formats' context and the
    /// User-Agent give it.
    static var operatingSystemName: String {
        #if os(iOS)
            return "iOS"
        #elseif os(macOS)
            return "macOS"
        #elseif os(tvOS)
            return "tvOS"
        #elseif os(watchOS)
            return "watchOS"
        #elseif os(visionOS)
            return "visionOS"
        #elseif os(Linux)
            return "Linux"
        #else
            return "unknown"
        #endif
    }

    /// The operating system's version: `major.minor.patch`.
    static var operatingSystemVersion: String {
        let version = ProcessInfo.processInfo.operatingSystemVersion
        return "\(version.majorVersion).\(version.minorVersion).\(version.patchVersion)"
    }

    /// Seconds on the system's monotonic clock that counts the time the
    /// device sleeps (Apple platforms: `CLOCK_MONOTONIC`, which includes
    /// sleep there; Linux: `CLOCK_BOOTTIME`), from an origin of the
    /// system's: what each event's age at upload is measured on.
    /// Read only through the ``SystemClock`` the configuration holds.
    @Sendable static func monotonicSeconds() -> Double {
        #if canImport(Darwin)
            // clock-exempt: SystemClock's monotonic source.
            return Double(clock_gettime_nsec_np(CLOCK_MONOTONIC)) / 1e9
        #else
            var time = timespec()
            // clock-exempt: SystemClock's monotonic source.
            clock_gettime(CLOCK_BOOTTIME, &time)
            return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
        #endif
    }

    // MARK: Lifecycle

    /// The notifications observed on this platform, and what each reports.
    private static var notifications: [(Notification.Name, PlatformEvent)] {
        var names: [(Notification.Name, PlatformEvent)] = []
        #if canImport(UIKit) && !os(watchOS)
            // iOS, tvOS, visionOS apps.
            names += [
                (UIApplication.didEnterBackgroundNotification, .didEnterBackground),
                (UIApplication.willEnterForegroundNotification, .willEnterForeground),
                (UIApplication.didBecomeActiveNotification, .didBecomeActive),
                (UIApplication.didReceiveMemoryWarningNotification, .memoryWarning),
            ]
        #endif
        #if os(iOS) || os(visionOS)
            names += [
                (UIApplication.protectedDataWillBecomeUnavailableNotification, .protectedDataWillBecomeUnavailable),
                (UIApplication.protectedDataDidBecomeAvailableNotification, .protectedDataDidBecomeAvailable),
            ]
        #endif
        #if os(iOS) || os(tvOS) || os(visionOS)
            // App extensions: their host's lifecycle (an extension cannot
            // reach UIApplication.shared).
            names += [
                (Notification.Name.NSExtensionHostDidEnterBackground, .didEnterBackground),
                (Notification.Name.NSExtensionHostWillEnterForeground, .willEnterForeground),
                (Notification.Name.NSExtensionHostDidBecomeActive, .didBecomeActive),
            ]
        #elseif canImport(AppKit)
            names += [
                (NSApplication.didResignActiveNotification, .willResignActive),
                (NSApplication.willTerminateNotification, .willResignActive),
            ]
        #endif
        return names
    }

    func observeLifecycle(_ handler: @escaping @Sendable (PlatformEvent) -> Void) -> PlatformObservation {
        let tokens = Self.notifications.map { name, event in
            NotificationCenter.default.addObserver(forName: name, object: nil, queue: nil) { _ in handler(event) }
        }
        // NSObjectProtocol tokens are not Sendable; NotificationCenter's
        // removal is thread-safe.
        let box = UncheckedTokens(tokens)
        return PlatformObservation {
            for token in box.tokens { NotificationCenter.default.removeObserver(token) }
        }
    }

    private struct UncheckedTokens: @unchecked Sendable {
        // Safe: only handed to NotificationCenter.removeObserver, which any
        // thread may call.
        let tokens: [any NSObjectProtocol]
        init(_ tokens: [any NSObjectProtocol]) { self.tokens = tokens }
    }

    // MARK: Background time

    func performExpiringActivity(reason: String, _ block: @escaping @Sendable (Bool) -> Void) {
        #if os(iOS) || os(tvOS) || os(watchOS) || os(visionOS)
            // Available in app extensions too, where UIApplication is not.
            ProcessInfo.processInfo.performExpiringActivity(withReason: reason, using: block)
        #else
            // macOS and Linux do not suspend processes this way: the time is
            // granted, on a thread of its own, as the system's would be.
            DispatchQueue.global(qos: .utility).async { block(false) }
        #endif
    }

    // MARK: Background transfers

    let backgroundTransfers = BackgroundTransferCenter()

    func makeBackgroundSession(
        identifier: String, sharedContainer: String?,
        events: @escaping @Sendable (BackgroundTransferEvent) -> Void
    ) -> (any BackgroundTransferSession)? {
        #if canImport(Darwin)
            return SystemBackgroundSession(identifier: identifier, sharedContainer: sharedContainer, events: events)
        #else
            return nil  // FoundationNetworking runs no transfer outside the process
        #endif
    }

    func completeBackgroundEvents(_ handler: @escaping @Sendable () -> Void) {
        DispatchQueue.main.async(execute: handler)
    }

    // MARK: Files and the device

    func makeNetworkPath() -> (any NetworkPathSource)? {
        #if canImport(Network)
            return SystemNetworkPath()
        #else
            return nil
        #endif
    }

    func availableSpace(at path: String) -> Int64? {
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent()
        #if canImport(Darwin)
            // The capacity for an important write: what the system would free
            // for it (purgeable space included), the figure Apple recommends
            // for deciding whether to write. Introduced in iOS 11, macOS
            // 10.13, tvOS 11 and watchOS 4, below every floor Spool supports.
            do {
                let values = try directory.resourceValues(forKeys: [.volumeAvailableCapacityForImportantUsageKey])
                return values.volumeAvailableCapacityForImportantUsage
            } catch {
                return nil  // the volume does not say: treated as enough
            }
        #else
            var info = statvfs()
            guard statvfs(directory.path, &info) == 0 else { return nil }
            return Int64(info.f_bavail) * Int64(info.f_frsize)
        #endif
    }

    func applyFilePolicy(to file: String, protection: FileProtection?, excludeFromBackup: Bool) throws {
        #if os(iOS) || os(tvOS) || os(watchOS) || os(visionOS)
            if let protection {
                try FileManager.default.setAttributes([.protectionKey: protection.type], ofItemAtPath: file)
            }
        #endif
        #if canImport(Darwin)
            if excludeFromBackup {
                var url = URL(fileURLWithPath: file)
                var values = URLResourceValues()
                values.isExcludedFromBackup = true
                try url.setResourceValues(values)
            }
        #endif
    }
}
