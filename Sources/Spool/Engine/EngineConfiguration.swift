import Foundation
import SpoolStorage

/// Everything an ``EventEngine`` is set up with.
///
/// A plain value: creating or changing one does no I/O. The engine copies it
/// at `init`; later changes to your copy have no effect. Consent, the enabled
/// switch and the excluded names can change at run time through
/// ``EventEngine/setConsent(_:)``, ``EventEngine/setEnabled(_:)`` and
/// ``EventEngine/setExcludedEventNames(_:)``.
///
/// ```swift
/// let configuration = EngineConfiguration(
///     database: .file(applicationSupport.appendingPathComponent("spool.sqlite")),
///     synchronous: .normal,
///     sessionEventLimit: 500)
/// ```
///
/// To upload, set ``collectorURL`` (and optionally ``dispatcher``), or start
/// from ``uploading(to:dispatcher:in:)``.
public struct EngineConfiguration: Sendable {
    /// Where the database lives. `.inMemory` keeps nothing across restarts.
    public var database: DatabaseLocation
    /// What a commit survives; see ``SynchronousMode``.
    public var synchronous: SynchronousMode
    /// The most events one session accepts, not counting priority events.
    /// `nil` (the default) means no limit. Events over it are not stored, delivered
    /// or uploaded, and `record` returns ``RecordOutcome/droppedSessionLimit``.
    public var sessionEventLimit: Int?
    /// Events that bypass the session limit and are not counted toward it.
    ///
    /// Defaults to the campaign events `inapp_seen`, `push_session` and
    /// `confirmation_page_view`; add your own with `formUnion(_:)`.
    /// `session_start` is always treated as priority.
    public var priorityEventNames: Set<String>
    /// Names stored and uploaded but never delivered to listeners,
    /// registrations, streams or durable listeners.
    ///
    /// `flush_event` (``EventEngine/heartbeatEventName``) is always excluded
    /// as well. Replace at run time with
    /// ``EventEngine/setExcludedEventNames(_:)``.
    public var excludedEventNames: Set<String>
    /// When false, `record` drops every event
    /// (``RecordOutcome/droppedDisabled``) until
    /// ``EventEngine/setEnabled(_:)`` turns recording on. Default true.
    public var enabled: Bool
    /// The user's data-collection consent at launch. While false, nothing is
    /// recorded, delivered or uploaded; change it with
    /// ``EventEngine/setConsent(_:)``. Default true.
    ///
    /// Spool does not remember consent across launches: store the user's
    /// choice yourself and pass it here every time. False here means "not
    /// granted yet": what an earlier launch queued stays queued. To withdraw
    /// (nothing recorded before is uploaded, ever), call
    /// ``EventEngine/setConsent(_:)`` with false, before or after `start()`.
    public var consent: Bool
    /// The most events the log keeps for consumers that have not finished them
    /// (durable listeners, the uploader). Past it the **oldest** give way
    /// (fresh events matter most to analytics and survey rules): the caller
    /// is never blocked, and every dropped event is counted per consumer
    /// (``UploadStatistics/dropped`` and the `dropped` column of
    /// `consumer_lag`). `nil` keeps everything; values below 1 count as 1,
    /// and when the engine uploads (``collectorURL`` set), a value below 100
    /// counts as 10,000 and one below ``batchSize`` as ``batchSize``.
    /// Default 10,000. Events recorded before a session starts wait in memory
    /// under the same bound (10,000 when it is `nil`).
    public var maximumRetainedEvents: Int?
    /// The most bytes the log's queued events may take (their names,
    /// parameters and targets, UTF-8). Past it the oldest give way, as with
    /// ``maximumRetainedEvents``, counted per consumer and in
    /// ``UploadStatistics/droppedOverBytes``. `nil`: no byte bound. Default
    /// 50 MB. Applies when uploading too.
    public var maximumQueueBytes: Int? = 50_000_000
    /// The oldest a queued event may be, in seconds since it was recorded.
    /// Past it the oldest give way (at most 1,024 per commit), counted in
    /// ``UploadStatistics/droppedOverAge``. `nil` (the default): an event
    /// waits however long the device is offline; collectors that refuse old
    /// events refuse them themselves. Applies when uploading too.
    public var maximumEventAge: TimeInterval?
    /// Where batches are uploaded. `nil`: nothing is uploaded (the log still
    /// feeds listeners and durable listeners); the database stays at
    /// ``database``.
    public var collectorURL: URL?
    /// The most events in one upload request, and the pending count that
    /// starts an upload. Default 10; 1 sends each event alone; 0 or less
    /// uses the default. A format's own per-request limit also applies.
    public var batchSize: Int
    /// How many upload requests may be in flight at once. Default 1: the
    /// collector receives events in log order. Above 1 (at most
    /// ``maximumConcurrentRequestsLimit``), the next batches are sent while
    /// the request before them is answered, so a backlog drains in fewer
    /// round trips, and arrival order is given up: a request may arrive
    /// before the one ahead of it, and when that one is not accepted whole
    /// (a retry, a refusal, a per-record answer that leaves records for a
    /// retry), the batches sent beside it are sent again after it, under
    /// the same `Idempotency-Key`. A collector that does not deduplicate on
    /// that key (a Kafka REST proxy) or a dispatcher of your own receives
    /// those batches twice. Answers are still settled in log order. 0 or
    /// less is 1.
    public var maximumConcurrentRequests = 1
    /// Seconds between timed uploads of whatever is pending. Default 60; 0
    /// uploads as soon as events are committed; negative uses the default.
    public var uploadInterval: TimeInterval
    /// What sends the batches. `nil` uses a ``DefaultEventDispatcher``
    /// with its defaults. A
    /// `DefaultEventDispatcher`'s `backingStore` and `dataStoreName` do not
    /// move the database: ``database`` says where it is (set by
    /// ``uploading(to:dispatcher:in:)`` from them). When they ask for another
    /// location than `database` and than their default, `start()` throws
    /// ``SpoolError/conflictingDatabaseLocation(configured:requested:)`` naming both.
    public var dispatcher: (any EventDispatcher)?
    /// How long the uploader waits before retrying a failed upload.
    public var retryPolicy: RetryPolicy
    /// How long the event history (for survey rules) keeps an occurrence, in
    /// seconds; `nil` keeps them until ``maximumHistoryRows`` pushes them out.
    /// Default 90 days.
    ///
    /// An EVENT_FREQUENCY rule is exact while its window fits in what the
    /// history keeps: windows up to this age (and `.ever` counts what is
    /// kept). Pruning runs at `start()` and as events are committed; its cost
    /// is proportional to what it deletes. The property values kept for
    /// survey filters (``Survey/historyProperties``) go at the same age.
    public var historyRetention: TimeInterval?
    /// The most rows the event history keeps; past it the oldest go. A row
    /// counts one event name's occurrences in one millisecond: an event
    /// recorded on its own is a row, a burst of one name a row per
    /// millisecond it spans. `nil` keeps every row within
    /// ``historyRetention``. Default 100,000 (about 7 MB on disk), which
    /// holds 90 days of a user who records a thousand events a day. The
    /// property values kept for survey filters are bounded the same way, in
    /// rows of their own (one per event name, property, value and
    /// millisecond).
    public var maximumHistoryRows: Int?
    /// How much may wait in memory for the writer; see ``WriteBufferLimit``.
    public var writeBuffer: WriteBufferLimit
    /// The data-protection class of the database and its `-wal` and `-shm`
    /// files on iOS, tvOS, watchOS and visionOS (no effect elsewhere).
    /// Default ``FileProtection/completeUntilFirstUserAuthentication``, the
    /// class that lets background work record while the device is locked;
    /// `nil` leaves the files as the app's defaults make them.
    public var fileProtection: FileProtection? = .completeUntilFirstUserAuthentication
    /// Whether the database files are excluded from iCloud and device
    /// backups (Apple platforms; no effect elsewhere). Default true: a queue
    /// of events not yet uploaded is not user data to restore on another
    /// device, where it would be uploaded twice.
    public var excludesFromBackup: Bool = true
    /// Whether Spool stops touching the database file while the app is in
    /// the background (after uploading what waits), so that iOS can suspend
    /// the app without a lock on a file in an app-group container (which it
    /// punishes with exception 0xdead10cc). Default true. Events recorded
    /// meanwhile are committed in short background windows. Set false only
    /// for a database outside any shared container.
    public var suspendsInBackground: Bool = true
    /// Whether ``EventEngine/start()`` salvages a database file it cannot
    /// use — not a database, reported malformed by SQLite when first read,
    /// cut short, missing events it committed, with a schema no migration
    /// explains, or with a newer schema than this library knows (an app
    /// rolled back to an older version: the columns it knows are copied) —
    /// instead of throwing. Default true: the file and its `-wal`
    /// and `-shm` are moved aside under a dated name, every row that can
    /// still be read is copied into a fresh file, and Spool starts on it (see
    /// ``SalvageReport``). False: `start()` throws, at every launch, and
    /// leaves the file untouched, for apps that handle a damaged file
    /// themselves.
    public var salvagesDamagedDatabase: Bool = true
    /// How long, in seconds, the copy of a salvaged database is kept for
    /// inspection before a later ``EventEngine/start()`` deletes it. Default
    /// 7 days. Only the last copy is kept, and only one Spool recognised as
    /// its own (every row it could read is in the fresh file); a file it did
    /// not recognise is set aside and deleted only by
    /// ``EventEngine/eraseAllData()``.
    public var damagedCopyRetention: TimeInterval = 7 * 86_400
    /// The free space, in bytes, below which the database file stops
    /// growing. Default 50 MB; `nil` never checks.
    ///
    /// After a commit, at most every 10 seconds, Spool reads the free space
    /// of the database's volume (`volumeAvailableCapacityForImportantUsage`
    /// on Apple platforms, `statvfs` elsewhere). Below this minimum, the log
    /// keeps the events and bytes it holds at that moment as its bounds, and
    /// the history its rows: each new event makes the oldest give way, as
    /// the queue bounds do (consumers count them as dropped:
    /// ``UploadStatistics/dropped``, `onMissed`), the WAL is truncated and
    /// then checkpointed after every commit, and a
    /// ``SpoolDiagnostic/Kind/lowDiskSpace`` diagnostic says why. Recording
    /// goes on. With one and a half times the minimum free again, the
    /// configured bounds return (``SpoolDiagnostic/Kind/diskSpaceRecovered``).
    public var minimumFreeDiskSpace: Int64? = 50_000_000
    /// How often, at most, the free space is read (seconds).
    var freeSpaceCheckInterval: TimeInterval = 10
    /// Called with every ``SpoolDiagnostic``: failures Spool cannot return to
    /// a caller (a commit failing on a full disk, a position that could not
    /// be saved, events `close()` could not commit…) and recoveries. Called
    /// on Spool's delivery queue, in order with the events listeners
    /// receive; return quickly. ``EventEngine/diagnostics()`` offers the same
    /// as an `AsyncSequence`.
    public var diagnosticHandler: (@Sendable (SpoolDiagnostic) -> Void)?

    /// Where the engine reads the time and waits: the system's clocks (the
    /// wall clock, and the monotonic one events' ages are measured on), or
    /// one a test advances itself.
    package var clock: any SpoolClock = SystemClock(monotonic: SystemPlatform.monotonicSeconds)

    /// Called with the result of every upload request (which events, what
    /// the collector answered, what Spool did), on Spool's delivery queue;
    /// return quickly. ``EventEngine/uploadResults()`` offers the same as an
    /// `AsyncSequence`, and the `upload_batches` table keeps the last 1,000
    /// (at most 20,000 events between them).
    public var uploadResultHandler: (@Sendable (UploadBatchResult) -> Void)?

    /// How many dead letters are kept, and for how long (10,000 for 30 days
    /// by default).
    public var deadLetterLimits = DeadLetterLimits()

    /// Which networks uploads may use: any (the default), or only unmetered
    /// ones. ``EventEngine/setUploadPolicy(_:)`` changes it while running
    /// (a user's "upload on Wi-Fi only" setting).
    public var uploadPolicy: UploadPolicy = .always

    /// Uploads that go on while the app is suspended or not running, through
    /// the system's background transfer service; nil (the default): uploads
    /// run only while the app does. See ``BackgroundTransfers``.
    public var backgroundTransfers: BackgroundTransfers?

    /// Encryption at rest: events' parameters, identities and contexts
    /// sealed with AES-256-GCM under the app's key; nil (the default): the
    /// file holds them readable, protected by its file protection class.
    /// See ``Encryption``.
    public var encryption: Encryption?

    /// The options every connection to the database opens with.
    func connectionOptions(sealer: RowSealer?, undecryptable: (@Sendable (Int) -> Void)?) -> ConnectionOptions {
        ConnectionOptions(
            fullSynchronous: synchronous == .full, sealer: sealer, clock: clock, onUndecryptable: undecryptable)
    }

    /// What tells the uploader whether a network path exists; nil: the
    /// platform's (`NWPathMonitor` on Apple platforms, none elsewhere).
    /// Tests set a ``ManualNetworkPath``.
    var networkPath: (any NetworkPathSource)?

    /// The operating system the engine reports to and asks for background
    /// time: the real one, or the scripted one the tests drive.
    var platform: any SpoolPlatform = SystemPlatform.shared

    /// Called at each point where ``EventEngine/start()`` waits, before it
    /// goes on: tests close the engine there.
    var startStep: (@Sendable (StartStep) async -> Void)?

    /// The campaign events that bypass the per-session limit by default
    /// (the initializer's default, hence `@usableFromInline`).
    @usableFromInline static let defaultPriorityEventNames: Set<String> = ["inapp_seen", "push_session", "confirmation_page_view"]

    // The upload defaults, named once for the initializer's signature (hence
    // @usableFromInline) and for the engine; the properties document them.
    /// Events per request unless you set another size: 10.
    @usableFromInline static let defaultBatchSize = 10
    /// Seconds between timed uploads unless you set another: 60.
    @usableFromInline static let defaultUploadInterval: TimeInterval = 60
    /// The retention bound unless you set another: 10,000.
    @usableFromInline static let defaultRetainedEvents = 10_000

    /// Creates a configuration; every parameter has a default, so name only
    /// what you change. See each property for its meaning.
    ///
    /// The defaults keep the database in memory (nothing survives a restart)
    /// and upload nothing: pass `database: .file(url)` for a durable queue
    /// and a `collectorURL` to upload.
    public init(
        database: DatabaseLocation = .inMemory,
        synchronous: SynchronousMode = .normal,
        sessionEventLimit: Int? = nil,
        priorityEventNames: Set<String> = EngineConfiguration.defaultPriorityEventNames,
        excludedEventNames: Set<String> = [],
        enabled: Bool = true,
        consent: Bool = true,
        maximumRetainedEvents: Int? = EngineConfiguration.defaultRetainedEvents,
        collectorURL: URL? = nil,
        batchSize: Int = EngineConfiguration.defaultBatchSize,
        uploadInterval: TimeInterval = EngineConfiguration.defaultUploadInterval,
        dispatcher: (any EventDispatcher)? = nil,
        retryPolicy: RetryPolicy = RetryPolicy(),
        historyRetention: TimeInterval? = 90 * 86_400,
        maximumHistoryRows: Int? = 100_000,
        writeBuffer: WriteBufferLimit = .default,
        diagnosticHandler: (@Sendable (SpoolDiagnostic) -> Void)? = nil
    ) {
        self.writeBuffer = writeBuffer
        self.diagnosticHandler = diagnosticHandler
        self.historyRetention = historyRetention
        self.maximumHistoryRows = maximumHistoryRows
        self.collectorURL = collectorURL
        self.batchSize = batchSize
        self.uploadInterval = uploadInterval
        self.dispatcher = dispatcher
        self.retryPolicy = retryPolicy
        self.database = database
        self.synchronous = synchronous
        self.sessionEventLimit = sessionEventLimit
        self.priorityEventNames = priorityEventNames
        self.excludedEventNames = excludedEventNames
        self.enabled = enabled
        self.consent = consent
        self.maximumRetainedEvents = maximumRetainedEvents
    }
}

extension EngineConfiguration {
    /// An engine that uploads to `collectorURL` through `dispatcher`, keeping
    /// its queue where the dispatcher's `backingStore` and `dataStoreName` say,
    /// inside `directory`.
    ///
    /// With the default dispatcher the database is
    /// `<directory>/OPTEventQueue.sqlite`, the name Optimizely's event
    /// dispatcher gives its queue. ``EventEngine/start()`` creates the
    /// directory when it is missing. Every
    /// other setting has its default: change the copy before creating the
    /// engine.
    ///
    /// ```swift
    /// var configuration = EngineConfiguration.uploading(
    ///     to: URL(string: "https://collector.example.com/v1/batch")!,
    ///     in: applicationSupportDirectory)
    /// configuration.batchSize = 50
    /// configuration.uploadInterval = 30
    /// let engine = EventEngine(configuration: configuration)
    /// ```
    public static func uploading(
        to collectorURL: URL, dispatcher: DefaultEventDispatcher = DefaultEventDispatcher(), in directory: URL
    ) -> EngineConfiguration {
        EngineConfiguration(
            database: dispatcher.databaseLocation(in: directory), collectorURL: collectorURL, dispatcher: dispatcher)
    }

    /// Why a `DefaultEventDispatcher`'s `backingStore` and `dataStoreName`
    /// disagree with ``database``, if they do: they ask for a location other
    /// than their default, and it is not `database` (a configuration from
    /// ``uploading(to:dispatcher:in:)`` always agrees).
    var locationConflict: SpoolError? {
        guard let dispatcher = dispatcher as? DefaultEventDispatcher else { return nil }
        let directory: URL
        switch database {
        case .file(let url): directory = url.deletingLastPathComponent()
        case .inMemory: directory = URL(fileURLWithPath: "/")
        }
        let asked = dispatcher.databaseLocation(in: directory)
        let byDefault = DatabaseLocation.file(
            directory.appendingPathComponent(DefaultEventDispatcher.defaultDataStoreName + ".sqlite"))
        guard asked != database, asked != byDefault else { return nil }
        let asking = asked == .inMemory ? "memory" : "a file named \(dispatcher.dataStoreName).sqlite"
        return .conflictingDatabaseLocation(configured: database.path, requested: asking)
    }

    /// The uploader's batch size: ``batchSize``, or its default when it is 0
    /// or less.
    var uploadBatchSize: Int { batchSize > 0 ? batchSize : Self.defaultBatchSize }

    /// The most ``maximumConcurrentRequests`` can ask for.
    public static let maximumConcurrentRequestsLimit = 8

    /// The uploader's requests in flight: ``maximumConcurrentRequests``
    /// within 1…``maximumConcurrentRequestsLimit``.
    var concurrentRequests: Int { min(max(1, maximumConcurrentRequests), Self.maximumConcurrentRequestsLimit) }

    /// The bound the log keeps: ``maximumRetainedEvents`` (at least 1);
    /// when uploading, a value below 100 is the default and one below
    /// ``uploadBatchSize`` is raised to it, so a batch always fits the queue.
    var retainedEvents: Int? {
        guard let bound = maximumRetainedEvents else { return nil }
        guard collectorURL != nil else { return max(1, bound) }
        return bound < 100 ? Self.defaultRetainedEvents : max(bound, uploadBatchSize)
    }

    /// The uploader's timer: ``uploadInterval``, or its default when it is
    /// negative or not finite.
    var uploadTimerInterval: TimeInterval {
        uploadInterval >= 0 && uploadInterval.isFinite ? uploadInterval : Self.defaultUploadInterval
    }
}
