import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Holding uploads back without giving anything up (W1, W2): a pause kept in
/// the database for every engine on the file and across launches, and the
/// unmetered-only policy on a scripted network path, against the real test
/// collector.
@Suite(.needsChildProcesses)
struct UploadPauseTests {
    @Test(
        "W1: while uploads are paused, recording and listeners go on and nothing is sent, in every engine on the file and after a relaunch, until one resumes"
    )
    func pauseIsKeptAndShared() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let engine = uploadingEngine(directory, collector: collector, batchSize: 10, timerInterval: 3_600)
        try await engine.start()
        try await engine.pauseUploads()
        let heard = CollectingEvents()
        engine.on(.everyEvent) { heard.append($0) }
        let ids = try recordEvents(engine, 25)  // 2 full batches: the automatic triggers find the pause
        try await engine.settle()
        await #expect(throws: SpoolError.uploadDeferred(reason: Uploader.pausedReason)) { try await engine.flush() }
        #expect(try await waitUntil(timeout: 10) { heard.events.withLock { $0.count } == 25 }, "listeners go on")
        var statistics = try await engine.uploadStatistics()
        #expect(statistics.paused && statistics.pending == 26)
        await engine.close()
        #expect(collector.requests().isEmpty)

        // The next launch, and another engine on the file: still paused.
        let again = uploadingEngine(directory, collector: collector, batchSize: 10, timerInterval: 3_600)
        let other = uploadingEngine(directory, collector: collector, batchSize: 10, timerInterval: 3_600)
        try await again.start()
        try await other.start()
        #expect(try await again.uploadStatistics().paused)
        await expectUploadDeferred { try await other.flush() }
        #expect(collector.requests().isEmpty)

        // One resumes; the other uploads what waits.
        try await again.resumeUploads()
        try await flushUntilDone(other)
        #expect(Set(collector.acceptedIDs()).isSuperset(of: ids))
        statistics = try await other.uploadStatistics()
        #expect(!statistics.paused && statistics.pending == 0)
        await again.close()
        await other.close()
    }

    @Test(
        "W1: an engine that found uploads paused sends at its next due commit once another engine on the file resumes them"
    )
    func resumedByAnotherEngine() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let resuming = uploadingEngine(directory, collector: collector, batchSize: 10, timerInterval: 3_600)
        let recording = uploadingEngine(directory, collector: collector, batchSize: 3, timerInterval: 3_600)
        try await resuming.start()
        try await recording.start()
        try await resuming.pauseUploads()
        let held = try recordEvents(recording, 3, prefix: "held")
        try await recording.settle()
        // Its own pass finds the pause.
        await #expect(throws: SpoolError.uploadDeferred(reason: Uploader.pausedReason)) { try await recording.flush() }
        try await resuming.resumeUploads()
        #expect(try await waitUntil(timeout: 20) { Set(collector.acceptedIDs()).isSuperset(of: held) })

        // No timer for an hour and no flush: only the commit can start it.
        let more = try recordEvents(recording, 3, prefix: "after")
        #expect(
            try await waitUntil(timeout: 20) { Set(collector.acceptedIDs()).isSuperset(of: more) },
            "the recording engine learnt of the resume from the database")
        #expect(!(try await recording.uploadStatistics().paused))
        await resuming.close()
        await recording.close()
    }

    @Test(
        "W2: with unmetered-only uploads nothing is sent on a metered path, flush() included, and what waits goes out as soon as an unmetered path comes"
    )
    func unmeteredOnly() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let path = ManualNetworkPath()
        path.set(available: true, metered: true)
        var configuration = uploadingConfiguration(directory, collector: collector, batchSize: 10, timerInterval: 3_600)
        configuration.networkPath = path
        configuration.uploadPolicy = .unmeteredOnly
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        let ids = try recordEvents(engine, 25)
        try await engine.settle()
        await #expect(throws: SpoolError.uploadDeferred(reason: Uploader.meteredReason)) { try await engine.flush() }
        #expect(try await engine.uploadStatistics().waitingForNetwork)
        #expect(collector.requests().isEmpty)

        path.set(available: true, metered: false)
        #expect(
            try await waitUntil(timeout: 20) { Set(collector.acceptedIDs()).isSuperset(of: ids) },
            "uploaded without a flush once the path is unmetered")
        #expect(collector.requests().count == 3, "no request was spent on the metered path")

        // The user's setting changes while running.
        path.set(available: true, metered: true)
        engine.setUploadPolicy(.always)
        let more = try recordEvents(engine, 3, prefix: "cellular")
        try await engine.flush()
        #expect(Set(collector.acceptedIDs()).isSuperset(of: more))
        engine.setUploadPolicy(.unmeteredOnly)
        _ = try recordEvents(engine, 1, prefix: "held")
        await expectUploadDeferred { try await engine.flush() }
        #expect(!(try await engine.uploadStatistics().paused), "a policy is not a pause")
        await engine.close()
    }
}
