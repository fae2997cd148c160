import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// W5: each format says how a collector corrects the device's clock, and the
/// real test collector does it: Spool's and Kafka REST's events carry their
/// age on a monotonic clock beside `sentAt`, Segment's `sentAt` beside each
/// timestamp. The device's clock is 3 hours off; the corrected times are the
/// collector's own clock's.
@Suite(.needsChildProcesses)
struct ClockCorrectionTests {
    /// The device's wall clock `offset` seconds off the real one (a test
    /// moves it: the user sets the clock), the system's monotonic clock, and
    /// dispatch's timers.
    final class SkewedClock: SpoolClock {
        let offset: Protected<Double>

        init(offset: Double) {
            self.offset = Protected(offset)
        }

        var now: Double { Date().timeIntervalSince1970 + offset.withLock { $0 } }
        var monotonic: Double? { SystemPlatform.monotonicSeconds() }

        func schedule(after delay: TimeInterval, on queue: DispatchQueue, _ body: @escaping @Sendable () -> Void) {
            SystemClock().schedule(after: delay, on: queue, body)
        }
    }

    static let threeHours: Double = 3 * 3_600

    enum Format: String, CaseIterable, Sendable {
        case spool, kafka, segment

        var format: any BatchFormat {
            switch self {
            case .spool: return SpoolBatchFormat()
            case .kafka: return KafkaRESTBatchFormat()
            // try!: a literal key and no context: nothing to refuse.
            case .segment: return try! SegmentBatchFormat(writeKey: "wk")
            }
        }

        /// Segment's events carry no age: Segment corrects with `sentAt`.
        var carriesAge: Bool { self != .segment }
    }

    /// When, on the real clock, the test recorded events: between `from`
    /// and `to`.
    struct Recorded {
        let ids: [String]
        let from: Date
        let to: Date
    }

    func record(_ engine: EventEngine, _ count: Int, prefix: String) async throws -> Recorded {
        let from = Date()
        let ids = try recordEvents(engine, count, prefix: prefix)
        let to = Date()
        try await engine.settle()
        return Recorded(ids: ids, from: from, to: to)
    }

    /// Each of `recorded`'s events as the collector corrected it, and the
    /// bounds of its true time on the collector's clock: recorded after
    /// `from`, and at most as long before its request arrived as the flush
    /// (started at `flushed`) took (the body is built after `flushed`).
    /// 2 ms for the milliseconds the times are written in.
    func corrections(_ collector: TestCollector, _ recorded: Recorded, flushed: Date) -> [(
        correction: TestCollector.Request.Correction, bounds: ClosedRange<Double>
    )] {
        collector.requests().filter(\.taken).flatMap { request in
            (request.clock ?? []).filter { $0.id.map(recorded.ids.contains) == true }.map { correction in
                let late = request.t - flushed.timeIntervalSince1970
                return (
                    correction,
                    (recorded.from.timeIntervalSince1970 - 0.002)...(recorded.to.timeIntervalSince1970 + late + 0.002)
                )
            }
        }
    }

    func engine(
        _ directory: TemporaryDirectory, _ collector: TestCollector, _ format: Format, _ clock: SkewedClock
    ) async throws -> EventEngine {
        try await collector.control(["format": format.rawValue])
        return uploadingEngine(directory, collector: collector, format: format.format, clock: clock)
    }

    @Test(
        "W5: with the device's clock 3 hours behind, each format's rule corrects every event to the collector's clock",
        arguments: Format.allCases)
    func threeHoursBehind(format: Format) async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let engine = try await engine(directory, collector, format, SkewedClock(offset: -Self.threeHours))
        try await engine.start()
        let recorded = try await record(engine, 5, prefix: "skewed")
        let flushed = Date()
        try await flushUntilDone(engine)
        #expect(collector.formatErrors().isEmpty, "\(collector.formatErrors())")
        let corrected = corrections(collector, recorded, flushed: flushed)
        try #require(corrected.count == 5)
        for (correction, bounds) in corrected {
            let timestamp = try #require(correction.timestamp)
            #expect(abs(timestamp + Self.threeHours - bounds.lowerBound) < 60, "the timestamp is the device's, 3 h off")
            let bySentAt = try #require(correction.bySentAt)
            #expect(bounds.contains(bySentAt), "t − (sentAt − timestamp): \(bySentAt) in \(bounds)")
            if format.carriesAge {
                #expect(correction.ageClock == "monotonic", "recorded in this launch")
                let byAge = try #require(correction.byAge)
                #expect(bounds.contains(byAge), "t − age: \(byAge) in \(bounds)")
            } else {
                #expect(correction.age == nil)
            }
        }
        await engine.close()
    }

    @Test(
        "W5: the device's clock set right between record and send: the age still corrects, sentAt − timestamp is off by the change",
        arguments: [Format.spool, .kafka])
    func clockSetBetweenRecordAndSend(format: Format) async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let clock = SkewedClock(offset: -Self.threeHours)
        let engine = try await engine(directory, collector, format, clock)
        try await engine.start()
        let recorded = try await record(engine, 5, prefix: "before_fix")
        clock.offset.withLock { $0 = 0 }
        let flushed = Date()
        try await flushUntilDone(engine)
        let corrected = corrections(collector, recorded, flushed: flushed)
        try #require(corrected.count == 5)
        for (correction, bounds) in corrected {
            let byAge = try #require(correction.byAge)
            #expect(bounds.contains(byAge), "t − age: \(byAge) in \(bounds)")
            let bySentAt = try #require(correction.bySentAt)
            #expect(
                abs(bySentAt + Self.threeHours - bounds.lowerBound) < 60,
                "the wall clock's difference took the change in")
        }
        await engine.close()
    }

    @Test(
        "W5: after a relaunch an earlier launch's events carry their age on the wall clock, marked, still corrected while the clock holds"
    )
    func relaunch() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let first = try await engine(directory, collector, .spool, SkewedClock(offset: -Self.threeHours))
        try await first.start()
        let earlier = try await record(first, 3, prefix: "first_launch")
        await first.close()
        let second = try await engine(directory, collector, .spool, SkewedClock(offset: -Self.threeHours))
        try await second.start()
        let later = try await record(second, 2, prefix: "second_launch")
        let flushed = Date()
        try await flushUntilDone(second)
        let marked = corrections(collector, earlier, flushed: flushed)
        let measured = corrections(collector, later, flushed: flushed)
        try #require(marked.count == 3 && measured.count == 2)
        #expect(marked.allSatisfy { $0.correction.ageClock == "wall" })
        #expect(measured.allSatisfy { $0.correction.ageClock == "monotonic" })
        for (correction, bounds) in marked + measured {
            let byAge = try #require(correction.byAge)
            #expect(bounds.contains(byAge), "t − age: \(byAge) in \(bounds)")
        }
        await second.close()
    }

    @Test(
        "W5: an event's age is the monotonic time since it was recorded, to the millisecond, whatever the wall clock does"
    )
    func ageIsMonotonic() async throws {
        let clock = ManualClock()
        let engine = try await startedEngine { $0.clock = clock }
        try engine.record("aged")
        try await engine.settle()
        clock.advance(by: 90)
        clock.setWall(to: clock.now + Self.threeHours)  // the user moved the clock forward
        let batchClock = try engine.batchClock()
        let read = try await engine.query {
            try UploadBatch.read(after: 0, limit: 10, format: SpoolBatchFormat(), clock: batchClock, from: $0)
        }
        guard case .batch(let batch)? = read else { throw TestSetupError("no batch") }
        let json = try #require(try JSONSerialization.jsonObject(with: batch.body) as? [String: Any])
        let event = try #require((json["events"] as? [[String: Any]])?.last)
        #expect(event["name"] as? String == "aged")
        #expect(event["age"] as? Int == 90_000 && event["ageClock"] == nil)
        // What sentAt − timestamp would say: 3 hours and 90 seconds.
        #expect(
            event["timestamp"] as? String
                == ISO8601Milliseconds.string(from: Date(timeIntervalSince1970: 1_700_000_000)))
        #expect(
            json["sentAt"] as? String
                == ISO8601Milliseconds.string(from: Date(timeIntervalSince1970: 1_700_000_090 + Self.threeHours)))
        await engine.close()
    }
}
