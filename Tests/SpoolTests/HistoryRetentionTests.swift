import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// The event history's default bound and its pruning.
struct HistoryRetentionTests {
    @Test("the history keeps at most maximumHistoryRows, the newest, pruned as events commit and at start")
    func rowBound() async throws {
        let directory = TemporaryDirectory()
        let configure: (inout EngineConfiguration) -> Void = { $0.maximumHistoryRows = 1_500 }
        let engine = try await startedEngine(directory, configure: configure)
        // A name per event: a row counts one name in one millisecond, so
        // each of these is a row of its own however fast they come.
        for index in 0..<6_000 { try engine.record("tap\(index)") }
        try await engine.settle()
        let whileRunning = try await engine.query { try $0.historyRowCount() }
        #expect(whileRunning <= 1_500 + 1_024 + EventLog.maximumGroupSize, "pruned as it goes: \(whileRunning)")
        await engine.close()

        let restarted = try await startedEngine(directory, configure: configure)
        // 1,500 kept at start, then the restart's own session_start.
        #expect(try await restarted.query { try $0.historyRowCount() } == 1_501)
        func count(_ name: String) async throws -> Bool {
            try await restarted.surveys.evaluate(.eventFrequency(EventFrequency(name, .exactly, 1)))
        }
        let (newest, oldestKept, firstGone) = try await (count("tap5999"), count("tap4500"), count("tap4499"))
        #expect(newest && oldestKept, "the newest kept")
        #expect(!firstGone, "the oldest gone")
        await restarted.close()
    }

    @Test("a burst of one name costs a few history rows, and counts every occurrence")
    func aBurstAddsToFewRows() async throws {
        let engine = try await startedEngine()
        for _ in 0..<5_000 { try engine.record("tap") }
        try await engine.settle()
        let (rows, occurrences) = try await engine.query { connection in
            (
                try connection.scalarInt("SELECT count(*) FROM event_history WHERE name = 'tap'"),
                try connection.scalarInt("SELECT sum(occurrences) FROM event_history WHERE name = 'tap'")
            )
        }
        #expect(occurrences == 5_000)
        #expect(rows < 5_000, "rows: \(rows), one per millisecond the burst spanned")
        #expect(try await engine.surveys.evaluate(.eventFrequency(EventFrequency("tap", .exactly, 5_000))))
        await engine.close()
    }

    @Test("the defaults: 90 days and 100,000 rows")
    func defaults() {
        let configuration = EngineConfiguration()
        #expect(configuration.historyRetention == TimeInterval(90 * 86_400))
        #expect(configuration.maximumHistoryRows == 100_000)
    }
}
