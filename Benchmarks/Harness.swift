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

/// User and system CPU seconds this process has used, every thread; with
/// `children`, those of its children it has waited for too; with
/// `userOnly`, without the system's.
func processCPUTime(children: Bool = false, userOnly: Bool = false) -> Double {
    var total = 0.0
    for who in children ? [RUSAGE_SELF, RUSAGE_CHILDREN] : [RUSAGE_SELF] {
        var usage = rusage()
        #if os(Linux)
            getrusage(who.rawValue, &usage)
        #else
            getrusage(who, &usage)
        #endif
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
        total += seconds(usage.ru_utime) + (userOnly ? 0 : seconds(usage.ru_stime))
    }
    return total
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

    /// A distribution-free interval of the median of about 95%: the order
    /// statistics X(k) and X(n-k+1) for the largest k whose binomial tail
    /// P(B ≤ k-1), B ~ Bin(n, ½), is at most 2.5%. Below six samples no k
    /// reaches 95% and the interval is min…max; from six on it narrows as
    /// samples are added (9 samples: the 2nd and 8th).
    var medianInterval: (low: Double, high: Double) {
        let sorted = self.sorted
        let n = sorted.count
        guard n > 0 else { return (.nan, .nan) }
        var k = 1
        var probability = pow(0.5, Double(n))  // P(B = j), from j = 0
        var tail = 0.0
        for j in 0..<n {
            tail += probability
            guard tail <= 0.025 else { break }
            k = j + 1
            probability *= Double(n - j) / Double(j + 1)
        }
        return (sorted[k - 1], sorted[n - k])
    }

    /// The width of `medianInterval` against the median, as a percentage.
    var intervalPercent: Double {
        let interval = medianInterval
        return median == 0 ? 0 : (interval.high - interval.low) / median * 100
    }
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

    /// A new directory holding a copy of every file in `template`'s.
    convenience init(copying template: Scratch, _ name: String) throws {
        self.init(name)
        for file in try FileManager.default.contentsOfDirectory(atPath: template.url.path) {
            try FileManager.default.copyItem(
                at: template.url.appendingPathComponent(file), to: url.appendingPathComponent(file))
        }
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
