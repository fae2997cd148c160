import Foundation

/// Uploads that go on while the app is suspended or not running: batches
/// due in the background are handed to a background `URLSession`, which the
/// system runs on the app's behalf.
///
/// When the app goes to the background with events queued, the next
/// batch's request body is written to a file beside the database
/// (`<database file>-transfers/`) and handed to the system, with its batch
/// id as the `Idempotency-Key` header. The hand-off is recorded in the
/// `background_transfers` table; its events stay queued until the system
/// reports the collector's answer, in this launch or after it relaunches
/// the app for it, and are then settled once, exactly as an answer to the
/// app's own request would be. While the app stays in the background, each
/// report hands the next batch over. A hand-off with no report after
/// ``resendAfter`` is sent again, with the same batch id and body, so a
/// collector that deduplicates on the key takes it once.
///
/// Turn it on, then pass the system's relaunch callback on — the one line
/// the app delegate needs:
///
/// ```swift
/// var configuration = EngineConfiguration.uploading(to: collector, in: applicationSupport)
/// configuration.backgroundTransfers = BackgroundTransfers()
///
/// // In the UIApplicationDelegate:
/// func application(_ application: UIApplication, handleEventsForBackgroundURLSession identifier: String,
///                  completionHandler: @escaping () -> Void) {
///     _ = EventEngine.handleEventsForBackgroundURLSession(identifier, completionHandler: completionHandler)
/// }
/// ```
///
/// Another process sharing the file (an extension) treats a batch the
/// system holds as a request in flight: its uploads wait behind it until the
/// report or ``resendAfter``.
///
/// The engine must be started in `application(_:didFinishLaunchingWithOptions:)`
/// (the system relaunches the app in the background for the reports).
/// Background transfers need a database file and the built-in transport
/// (a ``DefaultEventDispatcher`` without a custom transport: the system's
/// session cannot carry a custom transport's pinning or proxy). Where the
/// platform has no background sessions (Linux) uploads go out as without
/// it.
public struct BackgroundTransfers: Sendable, Hashable {
    /// How long a hand-off waits for the system's report before it is sent
    /// again by default (the initializer's default, hence
    /// `@usableFromInline`).
    @usableFromInline static let defaultResendAfter: TimeInterval = 3_600

    /// The part of the session identifier that names this queue; nil: the
    /// database file's name. The identifier is `spool.<name>`; give each
    /// process sharing a file (an app and its extensions) its own name.
    public var name: String?

    /// How long a hand-off waits for the system's report before it is sent
    /// again, with the same batch id. Default: an hour.
    public var resendAfter: TimeInterval

    /// For an app extension: the app group container the system downloads
    /// into (`URLSessionConfiguration.sharedContainerIdentifier`).
    public var sharedContainerIdentifier: String?

    /// Background transfers for this queue; every parameter has a default.
    public init(
        name: String? = nil, resendAfter: TimeInterval = BackgroundTransfers.defaultResendAfter,
        sharedContainerIdentifier: String? = nil
    ) {
        self.name = name
        self.resendAfter = resendAfter
        self.sharedContainerIdentifier = sharedContainerIdentifier
    }

    /// Every identifier of Spool's sessions starts with this.
    static let identifierPrefix = "spool."

    /// The session identifier for the database at `file`.
    func sessionIdentifier(for file: URL) -> String {
        Self.identifierPrefix + (name ?? file.lastPathComponent)
    }
}
