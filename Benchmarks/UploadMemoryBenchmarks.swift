import Foundation
import Spool
import SpoolStorage

/// Resident memory while recording 20,000 events and uploading them in
/// batches of 100 to the real collector on 127.0.0.1: each body format in a
/// fresh process (`--phase upload-memory --variant …`), so the peak is its
/// own. Spool's share is the peak minus the process before opening.
struct UploadMemoryBenchmarks {
    let quick: Bool
    let report: Report

    static let count = 20_000
    static let variants = ["spool-gzip", "spool-identity", "segment-gzip"]

    /// Every variant; `--quick` only the default (Spool's format, gzip).
    func run() throws {
        for variant in quick ? [Self.variants[0]] : Self.variants {
            _ = try report.runIsolatedValues("upload-memory", ["--variant", variant] + (quick ? ["--quick"] : []))
        }
    }

    /// One variant: record at a steady 10,000 events/s (ten every
    /// millisecond; twice that with `--quick`) while the dispatcher uploads
    /// each batch of 100 as it fills, then flush the rest; resident memory is
    /// sampled every 10 ms.
    static func measure(_ variant: String, quick: Bool, report: Report) async throws {
        guard let collector = LoopbackCollector(purpose: "memory while uploading", lifetime: 120) else { return }
        defer { collector.stop() }
        let scratch = Scratch("upload-memory")
        let (label, format): (String, any BatchFormat) =
            variant.hasPrefix("segment")
            ? ("Segment with a context", try UploadFormatBenchmarks.formats()[1].1)
            : ("Spool format", SpoolBatchFormat.spool)
        let compression: UploadCompression = variant.hasSuffix("identity") ? .identity : .gzip
        let startRSS = megabytes(currentRSS())
        let sampler = MemorySampler()
        let dispatcher = DefaultEventDispatcher(
            format: format, request: UploadRequestOptions(compression: compression))
        let engine = EventEngine(
            configuration: EngineConfiguration(
                database: .file(scratch.database), maximumRetainedEvents: count * 2, collectorURL: collector.url,
                batchSize: 100, uploadInterval: 60, dispatcher: dispatcher))
        try await engine.start()
        let perMillisecond = quick ? 20 : 10
        let start = now()
        for index in 0..<count {
            if index % perMillisecond == 0 {
                let due = start + UInt64(index / perMillisecond) * 1_000_000
                let current = now()
                if current < due { usleep(UInt32((due - current) / 1_000)) }
            }
            let (name, parameters) = UploadFormatBenchmarks.variants[index % UploadFormatBenchmarks.variants.count]
            try engine.recordRetrying(name, parameters: parameters)
        }
        try await engine.flush()
        let statistics = try await engine.uploadStatistics()
        await engine.close()
        let points = sampler.stop()
        let peak = megabytes(peakRSS())
        let name = "\(label), \(compression == .gzip ? "gzip" : "identity")"
        report.add(
            Series(
                id: "upload-memory/\(variant)", name: name, xUnit: "s", yUnit: "MB",
                points: [[0, startRSS]] + points))
        report.add(
            Row(
                area: "upload", name: "Spool's share of RSS recording + uploading 20k, \(name)",
                value: peak - startRSS, unit: "MB",
                detail:
                    "peak \(formatMegabytes(peak)), \(formatMegabytes(startRSS)) before opening; \(statistics.uploaded) events in \(statistics.requests) requests to the loopback collector, recorded at \(perMillisecond)k events/s",
                target: 15, comparison: .atMost, exact: true))
    }
}

/// Samples this process's resident memory every 10 ms on its own thread
/// until `stop()`: [seconds since start, MB] pairs.
final class MemorySampler: @unchecked Sendable {
    // Safe: `points` and `running` are only touched under `lock`.
    private let lock = NSLock()
    private var points: [[Double]] = []
    private var running = true

    init() {
        let start = now()
        Thread { [self] in
            while sample(start) { usleep(10_000) }
        }.start()
    }

    private func sample(_ start: UInt64) -> Bool {
        let point = [seconds(since: start), megabytes(currentRSS())]
        lock.lock()
        defer { lock.unlock() }
        if running { points.append(point) }
        return running
    }

    func stop() -> [[Double]] {
        lock.lock()
        defer { lock.unlock() }
        running = false
        return points
    }
}
