import Foundation
import Spool
import SpoolStorage

// spool-bench [--quick] [--output PATH] [--only AREA] [--svg FILE] [--compare OLD.json]
// spool-bench --svg FILE --from RESULTS.json     (a report from an earlier run)
// spool-bench --compare OLD.json --to NEW.json   (two earlier runs)
// spool-bench --self-test                        (SelfTest.swift, measures nothing)
//
// Measures Spool beside baselines written directly against SQLite, in the same
// run, and prints ratios: machines here are noisy, absolute numbers are not
// comparable between runs. How noisy this run's machine was is measured too
// (Noise.swift) and printed on one line.

let usage = """
    usage: spool-bench [--quick] [--output PATH] [--only append|burst|footprint|listen|upload|encryption|history|drain|curves]
                       [--svg FILE] [--compare OLD.json]
           spool-bench --svg FILE --from RESULTS.json
           spool-bench --compare OLD.json --to NEW.json
           spool-bench --self-test                       (checks verdicts, ids, files, the report)
    """
/// The committed run docs/BENCH.md shows: after a run from the package root,
/// spool-bench says how this machine's baselines compare with that run's.
let referenceResults = "docs/bench-results.json"
var quick = false
var output = "spool-bench-results.json"
var only: String?
var phase: String?
var phaseDatabase: URL?
var phaseCount = 0
var svgPath: String?
var comparePath: String?
var fromPath: String?
var variant: String?
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--quick": quick = true
    case "--output": output = arguments.popFirst() ?? output
    case "--only": only = arguments.popFirst()
    case "--phase": phase = arguments.popFirst()
    case "--database": phaseDatabase = arguments.popFirst().map { URL(fileURLWithPath: $0) }
    case "--count": phaseCount = arguments.popFirst().flatMap { Int($0) } ?? 0
    case "--variant": variant = arguments.popFirst()
    case "--svg": svgPath = arguments.popFirst()
    case "--compare": comparePath = arguments.popFirst()
    case "--from", "--to": fromPath = arguments.popFirst()
    case "--self-test":
        try SelfTest.run()
        exit(0)
    case "-h", "--help":
        print(usage)
        exit(0)
    default:
        print("unknown argument \(argument); see --help")
        exit(2)
    }
}

if let fromPath {
    // Earlier results only: a report, a comparison, or both; nothing is measured.
    let results = try ResultsFile.read(fromPath)
    if let svgPath {
        try SVGReport(results).write(to: svgPath)
        print("report written to \(svgPath)")
    }
    if let comparePath {
        for line in results.comparison(with: try ResultsFile.read(comparePath), oldName: comparePath) { print(line) }
    }
    exit(0)
}

#if DEBUG
    print("warning: a debug build; run `swift run -c release spool-bench` for real numbers")
#endif

let report = Report()
if let phase {
    // A child run measuring one phase in a fresh process (see Report.runIsolated).
    report.emitsJSONLines = true
    switch phase {
    case "append-backlog": try await AppendBenchmarks(quick: quick, report: report).backlogCost()
    case "burst-100k": try await RecordBurstBenchmarks(quick: quick, report: report).burst(100_000)
    case "burst-300k": try await RecordBurstBenchmarks(quick: quick, report: report).burst(300_000)
    case "burst-1m": try await RecordBurstBenchmarks(quick: quick, report: report).burst(1_000_000)
    case "buffered-bytes": try await RecordBurstBenchmarks(quick: quick, report: report).bufferedBytes()
    case "footprint-build": try await FootprintBenchmarks.build(phaseDatabase!, count: phaseCount)
    case "footprint-start": try await FootprintBenchmarks.start(phaseDatabase!)
    case "footprint-erase": try await FootprintBenchmarks.erase(phaseDatabase!)
    case "footprint-drain": try await FootprintBenchmarks.drain(phaseDatabase!)
    case "open-check": try await OpenCheckBenchmarks.measure(phaseDatabase!)
    case "caller":
        // record()'s caller side alone: a target row (the burst area runs
        // it in a fresh process), and a loop for a profiler.
        let calls = quick ? 500_000 : 2_000_000
        let caller = try await callerSide(calls)
        print(
            "caller side, no append:", formatNumber(caller.wall), "µs; fastest 10,000 calls",
            formatNumber(caller.fastest), "µs each")
        report.add(
            Row(
                area: "burst", name: "caller cost per record(10 parameters), fastest 10,000 calls",
                value: caller.fastest, unit: "µs",
                detail:
                    "--phase caller: \(calls) calls on an opted-out engine (validate, encode, gates; no append), the fastest run of 10,000; mean \(formatNumber(caller.wall)) µs",
                target: 1.5, comparison: .atMost))
    case "caller-append":
        // record()'s whole caller side, append included, on one thread with
        // the writer held back until the calls end: for A/B runs of caller
        // costs without the writer's thread competing for the cores.
        let (median, cpu) = try await callerWithAppend(200_000)
        print(
            "caller with append, writer held:", formatNumber(median), "µs median;", formatNumber(cpu), "µs thread CPU")
    case "record-parts":
        // Where record's time goes: the caller's side alone, the writer alone
        // (prebuilt records with history rows), and the whole path.
        let count = 300_000
        let caller = try await callerSide(count)
        print(
            "caller side, no append:", formatNumber(caller.wall), "µs;",
            "process CPU", formatNumber(caller.cpu), "µs/event")
        for history in [false, true] {
            let scratch = Scratch("parts")
            let database = try DatabaseQueue(path: scratch.database.path)
            let log = EventLog(database: database)
            let record = EventRecord(
                name: "purchase", parametersJSON: ListenerBenchmarks.encodedParameters,
                recordedAt: Date().timeIntervalSince1970, sessionID: AppendBenchmarks.session, addsToHistory: history)
            let start = now()
            let cpu = processCPUTime()
            for _ in 0..<count { try log.append(record) }
            let appended = now()
            try await log.waitUntilAllDurable()
            print(
                "writer, history \(history):",
                formatNumber(Double(now() - start) / Double(count) / 1_000), "µs/event;",
                "append alone", formatNumber(Double(appended - start) / Double(count) / 1_000), "µs;",
                "process CPU", formatNumber((processCPUTime() - cpu) / Double(count) * 1e6), "µs/event;",
                "writer thread CPU", formatNumber((log.writerCPUPerEvent ?? .nan) / 1_000), "µs/event")
            await log.close()
            log.database.close()
        }
    case "drain":
        // The stubbed drain alone, for a profiler: fills, and with
        // `--variant stop` stops itself (SIGSTOP) so that a profiler can
        // attach, then drains on SIGCONT; `--variant format[-stop]` drains
        // varied events through the Spool format (or `format-segment`,
        // `format-kafka-rest`; `-gzip` gzips them) and a stub transport.
        let stop = {
            guard variant?.hasSuffix("stop") == true else { return }
            FileHandle.standardOutput.write(Data("FILLED \(getpid())\n".utf8))
            raise(SIGSTOP)
        }
        let rate: Double
        if variant?.hasPrefix("format") == true {
            let formats = UploadFormatBenchmarks(quick: quick, report: report)
            // `format-segment` and `format-kafka-rest` pick the other formats.
            let (_, format) =
                try UploadFormatBenchmarks.formats().first {
                    variant?.contains($0.0.lowercased().replacingOccurrences(of: " ", with: "-")) == true
                } ?? ("Spool", SpoolBatchFormat.spool)
            let backlog = try await formats.fill(count: 200_000, format: format)
            rate = try await formats.drain(
                backlog, count: 200_000, format: format,
                compression: variant?.contains("gzip") == true ? .gzip : .identity,
                stub: UploadFormatBenchmarks.StubTransport(), beforeDrain: stop)
        } else {
            rate = try await DrainBenchmarks(quick: quick, report: report).spoolDrain(count: 200_000, beforeDrain: stop)
        }
        print("drain:", formatNumber(rate), "events/s")
    case "targeting":
        // The filtered survey rules' overhead on record (the history area's rows), for a profiler.
        try await HistoryBenchmarks(quick: quick, report: report).targeting()
    case "tail":
        // The end-to-end tail alone (its row), for a profiler.
        try await DrainBenchmarks(quick: quick, report: report).tail(concurrentRequests: Int(variant ?? "") ?? 1)
    case "round-trips":
        // The drain across a round trip, one and two requests in flight (its rows).
        try await DrainBenchmarks(quick: quick, report: report).roundTrips()
    case "upload-memory":
        try await UploadMemoryBenchmarks.measure(variant ?? "spool-gzip", quick: quick, report: report)
    case "pipeline-caller":
        // The caller's side with identity and two middlewares, for a profiler.
        let pipeline = PipelineBenchmarks(quick: quick, report: report)
        for withPipeline in [false, true] {
            let cost = try await pipeline.callerCost(count: 1_000_000, pipeline: withPipeline)
            print("caller side, pipeline \(withPipeline):", formatNumber(cost), "µs")
        }
    case "sealing":
        // Encryption's parts alone (docs/BENCH.md), for a profiler or an A/B.
        try await EncryptionBenchmarks(quick: quick, report: report).phase(variant, directory: phaseDatabase)
    case "record":
        // record() until durable alone, for a profiler (perf record … spool-bench --phase record).
        try await ListenerBenchmarks(quick: quick, report: report).recordThroughput()
    case "memory":
        // Where resident memory goes, step by step (a diagnostic; not in the table).
        func rss(_ label: String) { print("\(pad(label, 36)) \(formatMegabytes(megabytes(currentRSS())))") }
        rss("process start")
        let rawScratch = Scratch("memory-raw")
        let raw = RawSQLite(path: rawScratch.database.path)
        raw.createPlainEventsTable()
        rss("a raw SQLite connection opened")
        let scratch = Scratch("memory")
        let log = EventLog(database: try DatabaseQueue(path: scratch.database.path))
        rss("Spool's event log opened")
        for chunk in [1_000, 10_000, 10_000, 50_000] {
            for _ in 0..<chunk { try log.append(AppendBenchmarks.record()) }
            try await log.waitUntilAllDurable()
            rss("after appending \(chunk) at once")
        }
        await log.close()
        log.database.close()
    default: fatalError("unknown phase \(phase)")
    }
    emitValue("refused", Double(refusedAndRetried.withLock { $0 }))
    exit(0)
}
let started = Date()
// The run's budget for extra rounds on a noisy machine: --quick keeps its minute.
Comparison.deadline = now() + (quick ? 60 : 600) * 1_000_000_000
Comparison.extraTime = quick ? 0.5 : 2
let previous = try comparePath.map { try ResultsFile.read($0) }  // read first: a bad path fails before the run
print("spool-bench \(quick ? "(quick)" : "") on \(ProcessInfo.processInfo.activeProcessorCount) cores")
/// Whether the run includes `area`; a calibration follows each area run.
@MainActor func runs(_ area: String) -> Bool { only == nil || only == area }
report.calibrate("before")
if runs("append") {
    try await AppendBenchmarks(quick: quick, report: report).run()
    try await QueueBoundsBenchmarks(quick: quick, report: report).run()
    report.calibrate("after append")
}
if runs("burst") {
    try RecordBurstBenchmarks(quick: quick, report: report).run()
    report.calibrate("after burst")
}
if runs("footprint") {
    let backlog = try FootprintBenchmarks(quick: quick, report: report).run()
    try OpenCheckBenchmarks(quick: quick, report: report).run(on: backlog)
    report.calibrate("after footprint")
}
if runs("listen") {
    try await ListenerBenchmarks(quick: quick, report: report).run()
    try await PipelineBenchmarks(quick: quick, report: report).run()
    report.calibrate("after listen")
}
if runs("upload") {
    try await DrainBenchmarks(quick: quick, report: report).run()
    try await CollectorBoundaryBenchmarks(quick: quick, report: report).run()
    try UploadMemoryBenchmarks(quick: quick, report: report).run()
    report.calibrate("after upload")
}
if runs("encryption") {
    try await EncryptionBenchmarks(quick: quick, report: report).run()
    report.calibrate("after encryption")
}
if runs("history") {
    try await HistoryBenchmarks(quick: quick, report: report).run()
    report.calibrate("after history")
}
if runs("curves") {
    try await BacklogCurves(quick: quick, report: report).run()
    report.calibrate("after curves")
}
if only == "drain" {
    try await DrainBenchmarks(quick: quick, report: report).drain()
    report.calibrate("after drain")
}
report.add(report.refusalsRow())
let noise = report.noise
report.printTable(noise: noise)
try report.write(to: output, quick: quick, noise: noise)
print("results written to \(output) in \(formatNumber(Date().timeIntervalSince(started))) s")
if let svgPath {
    try SVGReport(try ResultsFile.read(output)).write(to: svgPath)
    print("report written to \(svgPath)")
}
if let previous, let comparePath {
    print("")
    for line in try ResultsFile.read(output).comparison(with: previous, oldName: comparePath) { print(line) }
} else if FileManager.default.fileExists(atPath: referenceResults),
    URL(fileURLWithPath: output).standardizedFileURL != URL(fileURLWithPath: referenceResults).standardizedFileURL,
    let line = try ResultsFile.read(output).machineComparison(
        with: ResultsFile.read(referenceResults), oldName: "\(referenceResults) (the committed run)")
{
    // A FAIL on a machine slower than the committed run's says little about Spool
    // until the baselines say how much slower it is.
    print("")
    print(line)
}

/// record()'s caller side alone — validate, encode, gates — `count` times on
/// an opted-out engine, so nothing is appended: wall time and process CPU
/// per call, and the fastest run of 10,000 calls (what A/B comparisons on a
/// noisy machine read), in µs.
func callerSide(_ count: Int) async throws -> (wall: Double, cpu: Double, fastest: Double) {
    let gated = EventEngine(configuration: EngineConfiguration(consent: false))
    try await gated.start()
    let start = now()
    let cpu = processCPUTime()
    var fastest = UInt64.max
    for _ in 0..<max(1, count / 10_000) {
        let runStart = now()
        for _ in 0..<10_000 { try gated.record("purchase", parameters: ListenerBenchmarks.parameters) }
        fastest = min(fastest, now() - runStart)
    }
    let calls = Double(max(1, count / 10_000) * 10_000)
    let wall = Double(now() - start) / calls / 1_000
    let cpuPerCall = (processCPUTime() - cpu) / calls * 1e6
    await gated.close()
    return (wall, cpuPerCall, Double(fastest) / 10_000 / 1_000)
}

/// Records `count` events (10 parameters) while a block holds the database
/// queue, so no commit runs until the calls end; returns the median call and
/// the calling thread's CPU per call, in µs.
func callerWithAppend(_ count: Int) async throws -> (median: Double, cpu: Double) {
    let scratch = Scratch("caller-append")
    var configuration = EngineConfiguration.unbounded(scratch.database)
    configuration.writeBuffer = WriteBufferLimit(maximumEvents: count + 1, maximumBytes: 1 << 30)
    let engine = EventEngine(configuration: configuration)
    try await engine.start()
    try await engine.settle()
    let release = DispatchSemaphore(value: 0)
    engine.databaseQueue?.async { _ in release.wait() }
    var calls = Histogram()
    let cpu = EventLog.threadCPUNanoseconds()
    for _ in 0..<count {
        let before = now()
        try engine.record("purchase", parameters: ListenerBenchmarks.parameters)
        calls.add(now() - before)
    }
    let cpuPerCall = Double(EventLog.threadCPUNanoseconds() - cpu) / Double(count) / 1_000
    release.signal()
    try await engine.settle()
    await engine.close()
    return (calls.median, cpuPerCall)
}
