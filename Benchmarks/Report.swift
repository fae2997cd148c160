import CSQLite
import Foundation

// MARK: - Results

/// Above this width of a ratio's interval (against its median, in percent),
/// the rounds disagree too much to judge the ratio by its median alone.
let spreadLimitPercent = 10.0

/// One row of the results table.
struct Row: Codable {
    enum Comparison: String, Codable {
        case atLeast = "≥"
        case atMost = "≤"
    }

    enum Verdict: String, Codable {
        case pass = "PASS"
        case fail = "FAIL"
        case inconclusive = "inconclusive (noisy)"
    }

    var area: String
    var name: String
    var value: Double
    var unit: String
    var detail: String = ""
    var target: Double? = nil
    var comparison: Comparison? = nil
    /// A count or a size, which a busy machine does not change (memory, lost
    /// events, file sizes): judged on its value whatever the noise.
    var exact: Bool? = nil
    /// The about-95% interval of the median a ratio was judged on, and how
    /// many rounds it took (`Samples.medianInterval`).
    var low: Double? = nil
    var high: Double? = nil
    var rounds: Int? = nil
    /// Other processes' share of the CPU while the row was measured.
    var othersShare: Double? = nil
    /// The row's stable name: "area/name" in lower case, apostrophes
    /// dropped, other runs of non-alphanumerics as one hyphen (`Row.key`);
    /// results files are compared by it.
    var id: String? = nil
    /// Written to the results file; computed from the rest.
    var verdict: Verdict? = nil

    var key: String { id ?? Self.key(area: area, name: name) }

    static func key(area: String, name: String) -> String {
        let words = name.lowercased().replacingOccurrences(of: "'", with: "").unicodeScalars.split {
            !CharacterSet.alphanumerics.contains($0)
        }
        return area.lowercased() + "/" + words.map { String(String.UnicodeScalarView($0)) }.joined(separator: "-")
    }

    func meets(_ value: Double) -> Bool {
        guard let target, let comparison else { return true }
        switch comparison {
        case .atLeast: return value >= target
        case .atMost: return value <= target
        }
    }

    var intervalPercent: Double {
        guard let low, let high, value != 0 else { return 0 }
        return (high - low) / abs(value) * 100
    }

    /// PASS when the whole interval meets the target; on a machine others
    /// kept busy (`noisyShare`), PASS when a tight interval's median meets
    /// it and otherwise "inconclusive (noisy)": contention slows Spool's two
    /// threads more than a one-thread baseline, so a miss there says nothing
    /// about Spool. On a quiet machine the median decides unless the rounds
    /// disagree (an interval wider than `spreadLimitPercent` across the
    /// target). Exact rows are judged on their value alone.
    var computedVerdict: Verdict? {
        guard target != nil, comparison != nil else { return nil }
        if exact == true || value.isNaN { return meets(value) ? .pass : .fail }
        let low = self.low ?? value
        let high = self.high ?? value
        if meets(low) && meets(high) { return .pass }
        let tight = intervalPercent <= spreadLimitPercent
        if (othersShare ?? 0) >= noisyShare { return tight && meets(value) ? .pass : .inconclusive }
        if tight || (!meets(low) && !meets(high)) { return meets(value) ? .pass : .fail }
        return .inconclusive
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

/// Points for a plot in the SVG report: `x` against `y` for one named line.
struct Series: Codable {
    var id: String
    var name: String
    var xUnit: String
    var yUnit: String
    var points: [[Double]]
}

final class Report {
    private(set) var rows: [Row] = []
    private(set) var series: [Series] = []
    private(set) var calibrations: [Calibration] = []
    /// In a child phase, rows go to standard output as JSON for the parent.
    var emitsJSONLines = false
    /// Where the current row's measurement began, for its `othersShare`,
    /// and where the area began: a row added right after another (too short
    /// a window to tell) gets the area's share.
    private var window = MachineSnapshot.take()
    private var areaWindow = MachineSnapshot.take()
    let runStart = MachineSnapshot.take()

    func add(_ row: Row) {
        var row = row
        if row.othersShare == nil { row.othersShare = window.othersShare() ?? areaWindow.othersShare() }
        row.id = row.key
        precondition(!rows.contains { $0.key == row.key }, "two rows named \(row.key): a row's name must be unique")
        row.verdict = row.computedVerdict
        rows.append(row)
        if emitsJSONLines {
            let data = try! Row.encoder().encode(row)
            print("ROW " + String(decoding: data, as: UTF8.self))
        } else {
            print(format(row))
        }
        startWindow()
    }

    /// Measurements from here on are the next row's.
    func startWindow() { window = .take() }

    func add(_ series: Series) {
        self.series.append(series)
        if emitsJSONLines {
            let data = try! Row.encoder().encode(series)
            print("SERIES " + String(decoding: data, as: UTF8.self))
        }
    }

    /// Times the calibration loop between areas (`label` says where) and
    /// prints it; rows measured next start their window after it.
    func calibrate(_ label: String) {
        let calibration = Calibration.measure(label)
        calibrations.append(calibration)
        areaWindow = .take()
        print(
            "calibration \(pad(label, 18)) at \(pad(formatNumber(seconds(since: runStart.time)), 4, left: true)) s: "
                + "\(formatNumber(calibration.single)) ms alone, "
                + "\(formatNumber(calibration.allCores)) ms on every core; load average "
                + "\(calibration.loadAverage.map { formatNumber($0) } ?? "n/a"), others "
                + (calibration.othersShare.map(formatPercent) ?? "n/a"))
        startWindow()
    }

    var noise: NoiseSummary { NoiseSummary(calibrations: calibrations, othersShare: runStart.othersShare()) }

    func format(_ row: Row) -> String {
        var verdict = ""
        if let result = row.verdict, let target = row.target, let comparison = row.comparison {
            verdict =
                result == .inconclusive
                ? "inconclusive (noisy)" : "\(result.rawValue) (target \(comparison.rawValue) \(formatNumber(target)))"
        }
        var detail = row.detail
        if let share = row.othersShare, share >= noisyShare, row.target != nil, row.exact != true {
            detail += (detail.isEmpty ? "" : "; ") + "others took \(formatPercent(share)) of the CPU meanwhile"
        }
        return
            "\(pad(row.area, 9)) \(pad(row.name, 52)) \(pad(formatNumber(row.value), 12, left: true)) \(pad(row.unit, 10)) \(pad(verdict, 26)) \(detail)"
    }

    func printTable(noise: NoiseSummary) {
        print("")
        print(String(repeating: "=", count: 120))
        print(
            "\(pad("area", 9)) \(pad("measurement", 52)) \(pad("value", 12, left: true)) \(pad("unit", 10)) \(pad("target", 26)) detail"
        )
        print(String(repeating: "-", count: 120))
        for row in rows { print(format(row)) }
        print(String(repeating: "=", count: 120))
        print(noise.line)
        print(Self.summary(rows))
    }

    /// "N of M targets met", with the failures and inconclusive rows named.
    static func summary(_ rows: [Row]) -> String {
        let judged = rows.filter { $0.verdict != nil }
        let failed = judged.filter { $0.verdict == .fail }
        let inconclusive = judged.filter { $0.verdict == .inconclusive }
        var text = "\(judged.count - failed.count - inconclusive.count) of \(judged.count) targets met"
        if !failed.isEmpty { text += "; FAIL: " + failed.map(\.name).joined(separator: "; ") }
        if !inconclusive.isEmpty {
            text +=
                "; inconclusive (noisy), rerun on a quiet machine to judge: "
                + inconclusive.map(\.name).joined(separator: "; ")
        }
        return text
    }

    func write(to path: String, quick: Bool, noise: NoiseSummary) throws {
        let file = ResultsFile(
            date: ISO8601DateFormatter().string(from: Date()), quick: quick,
            cores: ProcessInfo.processInfo.activeProcessorCount,
            sqliteVersion: String(cString: sqlite3_libversion()), noise: noise, rows: rows, series: series)
        try file.write(to: path)
    }
}
