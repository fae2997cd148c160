import Foundation
import SpoolStorage

/// The built-in dispatcher: batching rules, storage choice, and an HTTP sender.
///
/// The engine's uploader builds batches from the log by size (`batchSize`)
/// and by timer (`timerInterval`), and sends each through ``dispatchEvent(event:completionHandler:)``,
/// which POSTs the body as given with `content-type: application/json`.
///
/// Parameters follow the seed's rules (each is tested):
/// - `batchSize`: default 10; 1 sends each event alone; 0 or less uses the default.
/// - `timerInterval`: default 60 s; 0 sends as soon as events are committed;
///   negative uses the default.
/// - `maxQueueSize`: default 10 000; below 100 uses the default; below
///   `batchSize` is raised to `batchSize`. When the queue is full the **oldest**
///   events give way (fresh events matter most to analytics and survey
///   rules); the caller is never blocked, and every dropped event is counted
///   (``UploadStatistics/dropped`` and the `dropped` column of `consumer_lag`).
public final class DefaultEventDispatcher: EventDispatcher, BatchingPolicy {
    public static let defaultBatchSize = 10
    public static let defaultTimerInterval: TimeInterval = 60
    public static let defaultMaxQueueSize = 10_000
    public static let defaultDataStoreName = "OPTEventQueue"

    public let batchSize: Int
    public let backingStore: DataStoreType
    public let dataStoreName: String
    public let timerInterval: TimeInterval
    public let maxQueueSize: Int
    /// Seconds before a request with no answer counts as failed.
    public let requestTimeout: TimeInterval

    private let transport: HTTPTransport
    private let flushRequests = Protected<(@Sendable () -> Void)?>(nil)

    public init(
        batchSize: Int = DefaultEventDispatcher.defaultBatchSize,
        backingStore: DataStoreType = .file,
        dataStoreName: String = DefaultEventDispatcher.defaultDataStoreName,
        timerInterval: TimeInterval = DefaultEventDispatcher.defaultTimerInterval,
        maxQueueSize: Int = DefaultEventDispatcher.defaultMaxQueueSize,
        requestTimeout: TimeInterval = 30
    ) {
        let batchSize = batchSize <= 0 ? Self.defaultBatchSize : batchSize
        self.batchSize = batchSize
        self.backingStore = backingStore
        self.dataStoreName = dataStoreName.isEmpty ? Self.defaultDataStoreName : dataStoreName
        self.timerInterval = timerInterval < 0 || !timerInterval.isFinite ? Self.defaultTimerInterval : timerInterval
        let queueSize = maxQueueSize < 100 ? Self.defaultMaxQueueSize : maxQueueSize
        self.maxQueueSize = max(queueSize, batchSize)
        // Positive and at most a day: URLSession traps on huge or infinite timeouts.
        self.requestTimeout = requestTimeout > 0 ? min(requestTimeout, 86_400) : 30
        transport = HTTPTransport(requestTimeout: self.requestTimeout)
    }

    /// The database this dispatcher's queue lives in, for a given directory.
    public func databaseLocation(in directory: URL) -> DatabaseLocation {
        switch backingStore {
        case .file, .userDefaults: return .file(directory.appendingPathComponent(dataStoreName + ".sqlite"))
        case .memory: return .inMemory
        }
    }

    /// POSTs `event.body` unchanged to `event.url` with
    /// `content-type: application/json` (D7).
    public func dispatchEvent(event: EventForDispatch, completionHandler: DispatchCompletionHandler?) {
        transport.send(event) { outcome in completionHandler?(outcome) }
    }

    /// Asks the engine that uses this dispatcher to upload what is queued now.
    public func flushEvents() {
        flushRequests.withLock { $0 }?()
    }

    /// Set by the engine's uploader.
    func setFlushHandler(_ handler: (@Sendable () -> Void)?) {
        flushRequests.withLock { $0 = handler }
    }
}
