import CSQLite
import Foundation

// MARK: - Clock and keeping results alive

/// Monotonic nanoseconds.
@inline(__always)
func now() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

/// A file's size in bytes, 0 when it is missing.
func fileSize(_ path: String) -> Int {
    var status = stat()
    return stat(path, &status) == 0 ? Int(status.st_size) : 0
}

/// Keeps a value alive so the optimizer cannot drop the work that made it.
@inline(never)
func blackHole<T>(_ value: T) {
    withExtendedLifetime(value) {}
}

func seconds(since start: UInt64) -> Double {
    Double(now() - start) / 1e9
}

/// User and system CPU seconds this process has used, every thread.
func processCPUTime() -> Double {
    var usage = rusage()
    #if os(Linux)
        getrusage(RUSAGE_SELF.rawValue, &usage)
    #else
        getrusage(RUSAGE_SELF, &usage)
    #endif
    func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

// MARK: - Statistics

struct Samples {
    var values: [Double]

    var sorted: [Double] { values.sorted() }
    var median: Double { percentile(0.5) }
    var min: Double { values.min() ?? .nan }
    var max: Double { values.max() ?? .nan }

    func percentile(_ p: Double) -> Double {
        let sorted = self.sorted
        guard !sorted.isEmpty else { return .nan }
        let index = Swift.min(sorted.count - 1, Swift.max(0, Int((Double(sorted.count - 1) * p).rounded())))
        return sorted[index]
    }

    /// (max - min) / median, as a percentage: how noisy the runs were.
    var spreadPercent: Double { median == 0 ? 0 : (max - min) / median * 100 }
}

// MARK: - Memory

/// Peak resident set size of this process, in bytes.
///
/// Linux reads VmHWM, the mark `resetPeakRSS()` resets. Its `ru_maxrss` will
/// not do: a child started by `Process` (vfork-style spawn) inherits the
/// parent's peak there, so an isolated phase would report the parent's
/// memory. Elsewhere `getrusage`'s `ru_maxrss` is the process's own peak.
func peakRSS() -> Int {
    #if os(Linux)
        if let peak = statusField("VmHWM:") { return peak }
    #endif
    var usage = rusage()
    #if os(Linux)
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return usage.ru_maxrss * 1024  // kilobytes on Linux
    #else
        getrusage(RUSAGE_SELF, &usage)
        return Int(usage.ru_maxrss)  // bytes on Darwin
    #endif
}

/// Current resident set size (VmRSS) in bytes, or nil where the platform
/// does not say (only Linux's /proc is read here; rows print "n/a").
func currentRSS() -> Int? {
    #if os(Linux)
        return statusField("VmRSS:")
    #else
        return nil
    #endif
}

/// Resets the kernel's peak-RSS mark so a phase can measure its own peak
/// (Linux only; elsewhere a fresh process is the only reset).
func resetPeakRSS() {
    #if os(Linux)
        try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
    #endif
}

/// Megabytes of `bytes`, or NaN (printed "n/a") when unknown.
func megabytes(_ bytes: Int?) -> Double {
    bytes.map { Double($0) / 1_048_576 } ?? .nan
}

/// "12.3 MB", or "n/a on this platform" for a measurement it cannot make.
func formatMegabytes(_ value: Double) -> String {
    value.isNaN ? "n/a on this platform" : "\(formatNumber(value)) MB"
}

#if os(Linux)
    /// A `kB` field of /proc/self/status, in bytes.
    private func statusField(_ field: String) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix(field) {
            let digits = line.split(separator: " ").dropFirst().first { Int($0) != nil }
            return (digits.flatMap { Int($0) } ?? 0) * 1024
        }
        return nil
    }
#endif

// MARK: - Results

/// One row of the results table.
struct Row: Codable {
    enum Comparison: String, Codable {
        case atLeast = "≥"
        case atMost = "≤"
    }

    var area: String
    var name: String
    var value: Double
    var unit: String
    var detail: String = ""
    var target: Double? = nil
    var comparison: Comparison? = nil

    var passed: Bool? {
        guard let target, let comparison else { return nil }
        switch comparison {
        case .atLeast: return value >= target
        case .atMost: return value <= target
        }
    }

    /// JSON coders that carry an unknown value (NaN, "n/a") as the string
    /// "NaN" instead of failing.
    static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.nonConformingFloatEncodingStrategy = .convertToString(
            positiveInfinity: "Infinity", negativeInfinity: "-Infinity", nan: "NaN")
        return encoder
    }

    static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.nonConformingFloatDecodingStrategy = .convertFromString(
            positiveInfinity: "Infinity", negativeInfinity: "-Infinity", nan: "NaN")
        return decoder
    }
}

final class Report {
    private(set) var rows: [Row] = []
    /// In a child phase, rows go to standard output as JSON for the parent.
    var emitsJSONLines = false

    func add(_ row: Row) {
        rows.append(row)
        if emitsJSONLines {
            let data = try! Row.encoder().encode(row)
            print("ROW " + String(decoding: data, as: UTF8.self))
        } else {
            print(format(row))
        }
    }

    /// Runs `phase` in a fresh child process (this executable with `--phase`),
    /// so its memory measurements start clean, and adds the rows it reports.
    func runIsolated(_ phase: String, quick: Bool) throws {
        _ = try runIsolatedValues(phase, quick ? ["--quick"] : [])
    }

    /// Runs a phase in a fresh process with `arguments` and returns the
    /// values it printed as `VALUE <key> <number>` (rows it printed are added).
    func runIsolatedValues(_ phase: String, _ arguments: [String]) throws -> [String: Double] {
        let output = try runPhase(phase, arguments)
        var values: [String: Double] = [:]
        for line in output.split(separator: "\n") {
            if line.hasPrefix("ROW ") { add(try Row.decoder().decode(Row.self, from: Data(line.dropFirst(4).utf8))) }
            let fields = line.split(separator: " ")
            if fields.count == 3, fields[0] == "VALUE", let value = Double(fields[2]) {
                values[String(fields[1])] = value
            }
        }
        return values
    }

    /// Runs this executable with `--phase phase` and `arguments` and returns
    /// its standard output.
    private func runPhase(_ phase: String, _ arguments: [String]) throws -> String {
        #if os(Linux) || os(macOS)
            let process = Process()
            process.executableURL = Self.executable
            process.arguments = ["--phase", phase] + arguments
            let pipe = Pipe()
            process.standardOutput = pipe
            try process.run()
            let output = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            guard process.terminationStatus == 0 else {
                throw NSError(
                    domain: "spool-bench", code: Int(process.terminationStatus),
                    userInfo: [NSLocalizedDescriptionKey: "phase \(phase) failed"])
            }
            return String(decoding: output, as: UTF8.self)
        #else
            throw NSError(
                domain: "spool-bench", code: 1,
                userInfo: [
                    NSLocalizedDescriptionKey: "phase \(phase) needs a child process (Foundation.Process), "
                        + "which this platform lacks"
                ])
        #endif
    }

    /// This executable: `Bundle.main`'s, or `argv[0]` against the current
    /// directory.
    private static var executable: URL {
        let url =
            Bundle.main.executableURL
            ?? URL(
                fileURLWithPath: CommandLine.arguments[0],
                relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true))
        return url.resolvingSymlinksInPath()
    }

    func format(_ row: Row) -> String {
        var verdict = ""
        if let passed = row.passed, let target = row.target, let comparison = row.comparison {
            verdict = "\(passed ? "PASS" : "FAIL") (target \(comparison.rawValue) \(formatNumber(target)))"
        }
        return
            "\(pad(row.area, 9)) \(pad(row.name, 52)) \(pad(formatNumber(row.value), 12, left: true)) \(pad(row.unit, 10)) \(pad(verdict, 26)) \(row.detail)"
    }

    func printTable() {
        print("")
        print(String(repeating: "=", count: 120))
        print(
            "\(pad("area", 9)) \(pad("measurement", 52)) \(pad("value", 12, left: true)) \(pad("unit", 10)) \(pad("target", 26)) detail"
        )
        print(String(repeating: "-", count: 120))
        for row in rows { print(format(row)) }
        print(String(repeating: "=", count: 120))
        let judged = rows.compactMap(\.passed)
        print("\(judged.filter { $0 }.count) of \(judged.count) targets met")
    }

    func write(to path: String, quick: Bool) throws {
        struct File: Codable {
            var date: String
            var quick: Bool
            var cores: Int
            var sqliteVersion: String
            var rows: [Row]
        }
        let file = File(
            date: ISO8601DateFormatter().string(from: Date()), quick: quick,
            cores: ProcessInfo.processInfo.activeProcessorCount,
            sqliteVersion: String(cString: sqlite3_libversion()), rows: rows)
        let encoder = Row.encoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(file).write(to: URL(fileURLWithPath: path))
    }
}

func formatNumber(_ value: Double) -> String {
    if value.isNaN { return "n/a" }
    if abs(value) >= 100 { return String(format: "%.0f", value) }
    if abs(value) >= 10 { return String(format: "%.1f", value) }
    return String(format: "%.2f", value)
}

func pad(_ text: String, _ width: Int, left: Bool = false) -> String {
    let count = text.count
    guard count < width else { return text }
    let padding = String(repeating: " ", count: width - count)
    return left ? padding + text : text + padding
}

// MARK: - Scratch files

/// A fresh directory for one benchmark's database files.
final class Scratch {
    let url: URL

    init(_ name: String) {
        url = FileManager.default.temporaryDirectory.appendingPathComponent(
            "spool-bench-\(name)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    var database: URL { url.appendingPathComponent("bench.sqlite") }

    deinit {
        try? FileManager.default.removeItem(at: url)
    }
}

// MARK: - A lock for listeners that collect samples

final class Locked<Value>: @unchecked Sendable {
    // Safe: `value` is only touched while `lock` is held.
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    @discardableResult
    func withLock<T>(_ body: (inout Value) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}

// MARK: - Spool beside its baseline

/// Spool and its baseline measured alternately, round after round, so drift
/// on a noisy machine hits both alike; the ratio is taken per round.
struct Comparison {
    var spool: [Double] = []
    var baseline: [Double] = []
    var ratios: [Double] = []

    static func measure(
        rounds: Int, spool: () async throws -> Double, baseline: () async throws -> Double
    ) async rethrows -> Comparison {
        var comparison = Comparison()
        for _ in 0..<rounds {
            let s = try await spool()
            let b = try await baseline()
            comparison.spool.append(s)
            comparison.baseline.append(b)
            comparison.ratios.append(s / b)
        }
        return comparison
    }
}

extension Report {
    /// Three rows: Spool's median, the baseline's median, and the median of
    /// the per-round ratios against `target`.
    func add(
        _ comparison: Comparison, area: String, unit: String, spool: String, spoolDetail: String = "", baseline: String,
        baselineDetail: String = "", ratio: String, target: Double
    ) {
        let spoolSamples = Samples(values: comparison.spool)
        let baselineSamples = Samples(values: comparison.baseline)
        add(
            Row(
                area: area, name: spool, value: spoolSamples.median, unit: unit,
                detail: [spoolDetail, "spread \(formatNumber(spoolSamples.spreadPercent))%"].filter { !$0.isEmpty }
                    .joined(separator: ", ")))
        add(
            Row(
                area: area, name: baseline, value: baselineSamples.median, unit: unit,
                detail: [baselineDetail, "spread \(formatNumber(baselineSamples.spreadPercent))%"]
                    .filter { !$0.isEmpty }.joined(separator: ", ")))
        add(
            Row(
                area: area, name: ratio, value: Samples(values: comparison.ratios).median, unit: "×",
                detail: "median of \(comparison.ratios.count) per-round ratios", target: target, comparison: .atLeast))
    }
}
