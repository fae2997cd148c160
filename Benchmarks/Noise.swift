import Foundation

// How busy the machine is while spool-bench measures: other processes' share
// of the CPU over a window (Linux's /proc/stat), a fixed CPU-bound
// calibration loop timed between the areas (every platform), and the load
// average. A verdict that noise could have caused is not reported as one
// (see `Row.verdict`).

/// Above this share of the machine's CPU taken by other processes during a
/// measurement, a timing that misses its target is "inconclusive (noisy)".
let noisyShare = 0.10

/// A point in time to measure the machine's load from.
struct MachineSnapshot {
    var time = now()
    /// Busy and total jiffies of every CPU (/proc/stat), nil where unknown.
    var busy: Double?
    var total: Double?
    /// This process's CPU seconds, its reaped children's included, and
    /// those of `helpers`.
    var ownCPU: Double = processCPUTime(children: true)
    /// Running children that are part of what is measured (a loopback
    /// collector): their CPU is this process's own, not another's.
    var helpers: [Int32] = []

    static func take(countingAsOwn helpers: [Int32] = []) -> MachineSnapshot {
        var snapshot = MachineSnapshot()
        snapshot.helpers = helpers
        snapshot.ownCPU += helpers.reduce(0) { $0 + (runningChildCPUTime($1) ?? 0) }
        if let (busy, total) = readCPUJiffies() {
            snapshot.busy = busy
            snapshot.total = total
        }
        return snapshot
    }

    /// The share (0…1) of the machine's CPU that other processes used since
    /// `self` (until now when `end` is nil), or nil where the platform does
    /// not say or the window is too short to tell (under 0.1 s: the kernel
    /// counts in ticks of 10 ms).
    func othersShare(until end: MachineSnapshot? = nil) -> Double? {
        let end = end ?? .take(countingAsOwn: helpers)
        guard let busy, let total, let endBusy = end.busy, let endTotal = end.total,
            Double(end.time - time) / 1e9 >= 0.1, endTotal > total
        else { return nil }
        let own = (end.ownCPU - ownCPU) * clockTicksPerSecond
        return min(1, max(0, (endBusy - busy - own) / (endTotal - total)))
    }
}

/// The kernel's clock ticks per second (USER_HZ), the unit of /proc/stat.
private let clockTicksPerSecond = Double(max(1, sysconf(Int32(_SC_CLK_TCK))))

/// user+nice+system+irq+softirq+steal and that plus idle+iowait, summed over
/// every CPU, from /proc/stat's first line (Linux only; steal is time a
/// hypervisor gave to another machine).
private func readCPUJiffies() -> (busy: Double, total: Double)? {
    #if os(Linux)
        let path = "/proc/stat"
        guard FileManager.default.fileExists(atPath: path),
            let text = try? String(contentsOfFile: path, encoding: .utf8),  // try?: nil means "unknown"
            let line = text.split(separator: "\n").first, line.hasPrefix("cpu ")
        else { return nil }
        let fields = line.split(separator: " ").dropFirst().compactMap { Double($0) }
        guard fields.count >= 8 else { return nil }
        let busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + fields[7]
        return (busy, busy + fields[3] + fields[4])
    #else
        return nil
    #endif
}

/// The user and system CPU seconds of the running child `pid` so far
/// (`/proc/<pid>/stat`, Linux only), nil where unknown.
private func runningChildCPUTime(_ pid: Int32) -> Double? {
    #if os(Linux)
        let path = "/proc/\(pid)/stat"
        guard FileManager.default.fileExists(atPath: path),
            let text = try? String(contentsOfFile: path, encoding: .utf8),  // try?: nil means "unknown"
            let nameEnd = text.lastIndex(of: ")")
        else { return nil }
        // After the command's name in parentheses: the state (field 3), …,
        // utime (14) and stime (15), in clock ticks.
        let fields = text[text.index(after: nameEnd)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / clockTicksPerSecond
    #else
        return nil
    #endif
}

/// The one-minute load average, where the platform has one.
func systemLoadAverage() -> Double? {
    var loads = [Double](repeating: 0, count: 3)
    return getloadavg(&loads, 3) >= 1 ? loads[0] : nil
}

// MARK: - Calibration

/// A fixed CPU-bound loop timed alone and on every core at once. On a quiet
/// machine every copy runs as fast as one alone; each core another process
/// takes slows the copies down.
struct Calibration: Codable {
    var label: String
    /// Milliseconds for one copy alone (the fastest of three).
    var single: Double
    /// Milliseconds until every copy of the loop, one per core, finished.
    var allCores: Double
    var loadAverage: Double?
    /// Other processes' share of the CPU during the calibration, if known.
    var othersShare: Double?

    static let iterations = 20_000_000

    /// The calibration in one phrase, for a row measured beside it.
    var summary: String {
        "calibration loop \(formatNumber(single)) ms alone, \(formatNumber(allCores)) ms on every core, others "
            + (othersShare.map(formatPercent) ?? "n/a")
    }

    static func measure(_ label: String) -> Calibration {
        let start = MachineSnapshot.take()
        let single = (0..<3).map { _ in timeLoop(copies: 1) }.min()!
        let all = timeLoop(copies: ProcessInfo.processInfo.activeProcessorCount)
        return Calibration(
            label: label, single: single, allCores: all, loadAverage: systemLoadAverage(),
            othersShare: start.othersShare())
    }

    /// Milliseconds until `copies` threads each ran the loop once.
    private static func timeLoop(copies: Int) -> Double {
        let start = now()
        DispatchQueue.concurrentPerform(iterations: copies) { _ in blackHole(spin(iterations)) }
        return Double(now() - start) / 1e6
    }

    @inline(never)
    private static func spin(_ count: Int) -> UInt64 {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        for _ in 0..<count {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
        }
        return state
    }
}

/// The run's calibrations and load, and the one-line classification.
struct NoiseSummary: Codable {
    var classification: String
    var quiet: Bool
    /// Other processes' share of the CPU over the whole run, if known.
    var othersShare: Double?
    var calibrations: [Calibration]
    var line: String

    init(calibrations: [Calibration], othersShare: Double?) {
        self.calibrations = calibrations
        self.othersShare = othersShare
        // Each calibration against the fastest single copy seen in the run.
        let fastest = calibrations.map(\.single).min() ?? .nan
        let slowdowns = calibrations.map { $0.allCores / fastest }
        let worst = slowdowns.max() ?? .nan
        let share = othersShare ?? 0
        quiet = share < noisyShare && !(worst > 1.25)
        classification = quiet ? "quiet" : "noisy"
        var parts = [String]()
        if let othersShare {
            parts.append("other processes used \(formatPercent(othersShare)) of the CPU during the run")
        }
        parts.append(
            "calibration loop on every core \(formatNumber(slowdowns.min() ?? .nan))–\(formatNumber(worst))× "
                + "its fastest single copy (\(calibrations.count) runs, \(formatNumber(fastest)) ms)")
        let loads = calibrations.compactMap(\.loadAverage)
        if let low = loads.min(), let high = loads.max() {
            parts.append(
                "load average \(formatNumber(low))–\(formatNumber(high)) on \(ProcessInfo.processInfo.activeProcessorCount) cores (spool-bench's own threads included)"
            )
        }
        line = "machine: \(classification.uppercased()) — " + parts.joined(separator: "; ")
    }
}

func formatPercent(_ share: Double) -> String {
    share.isNaN ? "n/a" : "\(formatNumber(share * 100))%"
}
