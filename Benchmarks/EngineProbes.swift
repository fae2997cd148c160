import Foundation
import Spool
import SpoolStorage

// What the benchmarks need beyond the public API, built here from the
// library's package-level parts: the library itself ships no benchmark hooks.

extension EventEngine {
    /// Pushes `count` synthetic committed events (parameters `json`) through
    /// the engine's real delivery queue in commit-sized groups and returns
    /// once all are delivered: the listener fan-out cost alone — reading the
    /// parameters back from JSON once per event, then every listener —
    /// without the commit in front of it.
    func deliverSyntheticEvents(
        _ count: Int, name: String, json: String, groupSize: Int = 4_096
    ) async {
        var seq: Int64 = 0
        var remaining = count
        while remaining > 0 {
            let group = (0..<min(groupSize, remaining)).map { _ -> StoredEvent in
                seq += 1
                return StoredEvent(
                    seq: seq, id: "", name: name, parametersJSON: json, recordedAt: 0, sessionID: nil, priority: false)
            }
            remaining -= group.count
            delivery.enqueue(group)
        }
        await delivery.drain()
    }
}

/// Copies the whole WAL of the database at `url` into the file and truncates
/// it, so a measurement starts from the same state as a baseline.
func checkpointAndTruncateWAL(_ url: URL) {
    let raw = RawSQLite(path: url.path)
    raw.exec("PRAGMA wal_checkpoint(TRUNCATE)")
}

/// Evaluates `condition` `times` times on the engine's own connection, on
/// its database queue, and returns each evaluation's duration in
/// nanoseconds: the SQL cost without the hop.
func measureEvaluation(_ condition: SurveyCondition, times: Int, in engine: EventEngine) async throws -> [UInt64] {
    guard let database = engine.databaseQueue else { throw SpoolError.notStarted }
    let now = Date().timeIntervalSince1970
    return try await database.run { connection in
        try (0..<times).map { _ in
            let start = DispatchTime.now().uptimeNanoseconds
            _ = try condition.holds(atNow: now, in: connection)
            return DispatchTime.now().uptimeNanoseconds - start
        }
    }
}

// MARK: - Appends the writer could not make room for

/// How many `record` and `append` calls in this process threw `bufferFull`
/// and were tried again (`recordRetrying`, `appendRetrying`).
let refusedAndRetried = Locked(0)

/// Tries `body` again when it throws `bufferFull` — the writer made no room
/// within `EventLog.maximumWaitForRoom` (2 s), which a machine busy enough to
/// stall one group commit that long causes — at most 30 times (a minute),
/// counting each refusal in `refusedAndRetried`.
@inline(__always)
func retryingBufferFull<T>(_ body: () throws -> T) throws -> T {
    var attempts = 0
    while true {
        do {
            return try body()
        } catch let error where attempts < 30 && isBufferFull(error) {
            attempts += 1
            refusedAndRetried.withLock { $0 += 1 }
        }
    }
}

private func isBufferFull(_ error: any Error) -> Bool {
    switch error {
    case SpoolError.bufferFull, StorageError.bufferFull: return true
    default: return false
    }
}

extension EventEngine {
    /// `record`, tried again while it throws `SpoolError.bufferFull`
    /// (`retryingBufferFull`).
    func recordRetrying(_ name: String, parameters: [String: EventValue] = [:]) throws {
        try retryingBufferFull { _ = try record(name, parameters: parameters) }
    }
}

extension EventLog {
    /// `append`, tried again while it throws `StorageError.bufferFull`
    /// (`retryingBufferFull`).
    @discardableResult
    func appendRetrying(_ record: EventRecord) throws -> AppendReceipt {
        try retryingBufferFull { try append(record) }
    }
}

extension EngineConfiguration {
    /// An engine on the file `database` that keeps every event: no count
    /// bound and no byte bound, so a benchmark that fills the log past 50 MB
    /// measures that backlog, not the bound dropping the oldest.
    static func unbounded(_ database: URL) -> EngineConfiguration {
        var configuration = EngineConfiguration(database: .file(database), maximumRetainedEvents: nil)
        configuration.maximumQueueBytes = nil
        return configuration
    }
}
