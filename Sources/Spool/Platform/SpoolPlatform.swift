import Foundation
import SpoolStorage

/// Everything Spool asks of the operating system, behind one seam.
///
/// The engine decides what to do (``EventEngine/react(to:)``,
/// ``BackgroundActivity``); a platform only reports and performs.
/// ``SystemPlatform`` is the thin glue to Apple's APIs (and the plain answers
/// elsewhere); the tests drive the same engine with a scripted fake OS.
protocol SpoolPlatform: AnyObject, Sendable {
    /// Starts reporting the app's lifecycle to `handler`, from any thread;
    /// the returned value stops it.
    func observeLifecycle(_ handler: @escaping @Sendable (PlatformEvent) -> Void) -> PlatformObservation

    /// Asks for time to finish work before the process is suspended, with
    /// the system's contract: `block` is called once with `false` when time
    /// is granted (it lasts while `block` runs, so `block` may wait there,
    /// on a thread of the system's), and once with `true` when it runs out,
    /// possibly while the first call is still running; when no time can be
    /// granted, `block` is called only once, with `true`.
    func performExpiringActivity(reason: String, _ block: @escaping @Sendable (_ expired: Bool) -> Void)

    /// What reports whether a network path exists, or nil where the
    /// platform has none.
    func makeNetworkPath() -> (any NetworkPathSource)?

    /// Bytes the app can still write on the volume holding `path`'s
    /// directory, or nil when the platform does not say.
    func availableSpace(at path: String) -> Int64?

    /// Gives `file` its data-protection class and backup exclusion, where
    /// the platform has them; throws what could not be applied.
    func applyFilePolicy(to file: String, protection: FileProtection?, excludeFromBackup: Bool) throws

    /// This platform's background sessions, by identifier.
    var backgroundTransfers: BackgroundTransferCenter { get }

    /// A background transfer session with `identifier`, reporting to
    /// `events` from any thread; nil where the platform has none.
    func makeBackgroundSession(
        identifier: String, sharedContainer: String?,
        events: @escaping @Sendable (BackgroundTransferEvent) -> Void
    ) -> (any BackgroundTransferSession)?

    /// Runs the completion handler the system gave for a relaunch, where
    /// the system wants it called (the main thread).
    func completeBackgroundEvents(_ handler: @escaping @Sendable () -> Void)
}

/// What the operating system tells an engine.
enum PlatformEvent: Sendable, Hashable {
    /// The app, or the host of an app extension, went to the background.
    case didEnterBackground
    /// The app, or an extension's host, is about to become active again.
    case willEnterForeground
    /// The app, or an extension's host, is active.
    case didBecomeActive
    /// The app steps back or quits where no suspension follows (macOS).
    case willResignActive
    /// The device is locking: files with complete protection become
    /// unreadable.
    case protectedDataWillBecomeUnavailable
    /// The device was unlocked.
    case protectedDataDidBecomeAvailable
    /// The system is short of memory.
    case memoryWarning
}

/// Stops a platform's reports when cancelled (at `close()`).
final class PlatformObservation: Sendable {
    private let stop: Protected<(@Sendable () -> Void)?>

    init(_ stop: @escaping @Sendable () -> Void) {
        self.stop = Protected(stop)
    }

    /// Stops the reports; a second call does nothing.
    func cancel() {
        let stop = self.stop.withLock { stop in
            defer { stop = nil }
            return stop
        }
        stop?()
    }
}
