import Foundation

/// The results file spool-bench writes (`--output`) and reads back
/// (`--compare`, `--svg … --from`).
///
/// Schema version 2: `schema`, `schemaVersion`, `noise` (the run's
/// calibrations and classification), `series` (the SVG report's points), and
/// per row `id` (its stable name), `verdict`, `low`/`high`/`rounds` for a
/// ratio and `othersShare`. Every row keeps version 1's `area`, `name`,
/// `value`, `unit`, `detail`, `target` and `comparison`; a version-1 file
/// (no `schemaVersion`) reads with its ids derived from area and name.
struct ResultsFile: Codable {
    static let currentSchemaVersion = 2

    var schema: String? = "spool-bench-results"
    var schemaVersion: Int? = ResultsFile.currentSchemaVersion
    var date: String
    var quick: Bool
    var cores: Int
    var sqliteVersion: String
    var noise: NoiseSummary?
    var rows: [Row]
    var series: [Series]? = nil

    init(
        date: String, quick: Bool, cores: Int, sqliteVersion: String, noise: NoiseSummary?, rows: [Row],
        series: [Series]
    ) {
        self.date = date
        self.quick = quick
        self.cores = cores
        self.sqliteVersion = sqliteVersion
        self.noise = noise
        self.rows = rows
        self.series = series
    }

    static func read(_ path: String) throws -> ResultsFile {
        let file = try Row.decoder().decode(ResultsFile.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
        if let version = file.schemaVersion, version > currentSchemaVersion {
            throw NSError(
                domain: "spool-bench", code: 2,
                userInfo: [
                    NSLocalizedDescriptionKey:
                        "\(path) has schema version \(version); this spool-bench reads up to \(currentSchemaVersion)"
                ])
        }
        return file
    }

    func write(to path: String) throws {
        let encoder = Row.encoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(self).write(to: URL(fileURLWithPath: path))
    }

    func series(_ id: String) -> Series? { series?.first { $0.id == id } }
    func row(_ key: String) -> Row? { rows.first { $0.key == key } }
}

// MARK: - Comparing two runs

extension ResultsFile {
    /// One line per row of `self` (the new run) beside the same row of
    /// `old`: both values, the change, and whether it is better or worse
    /// where the row says which way is better; then the rows only one has.
    /// A line on the two machines comes first (``machineComparison(with:oldName:)``).
    func comparison(with old: ResultsFile, oldName: String) -> [String] {
        var lines = [
            "compared with \(oldName) (\(old.date)\(old.quick ? ", quick" : ""), "
                + "machine \(old.noise?.classification ?? "not classified")) — now \(date)\(quick ? ", quick" : ""), "
                + "machine \(noise?.classification ?? "not classified")"
        ]
        if let machines = machineComparison(with: old, oldName: oldName) { lines.append(machines) }
        lines += [
            "\(pad("row", 64)) \(pad("before", 10, left: true)) \(pad("after", 10, left: true)) \(pad("unit", 9)) "
                + "\(pad("change", 8, left: true))  verdict"
        ]
        let oldRows = Dictionary(old.rows.map { ($0.key, $0) }, uniquingKeysWith: { first, _ in first })
        var seen = Set<String>()
        for row in rows {
            seen.insert(row.key)
            guard let before = oldRows[row.key] else {
                lines.append(
                    "\(pad(row.key, 64)) \(pad("—", 10, left: true)) \(pad(formatNumber(row.value), 10, left: true)) \(row.unit)  new row"
                )
                continue
            }
            let change = before.value == 0 || before.value.isNaN ? Double.nan : (row.value / before.value - 1) * 100
            var verdict = ""
            let was = before.verdict ?? before.computedVerdict
            let isNow = row.verdict ?? row.computedVerdict
            if was != nil || isNow != nil {
                verdict = "\(was?.rawValue ?? "—") → \(isNow?.rawValue ?? "—")"
            }
            let direction = Self.betterDirection(row)
            var judgement = ""
            if let direction, !change.isNaN, abs(change) >= 0.5 {
                judgement = (change > 0) == (direction > 0) ? " better" : " worse"
            }
            let changeText = change.isNaN ? "n/a" : String(format: "%+.1f%%", change)
            lines.append(
                "\(pad(row.key, 64)) \(pad(formatNumber(before.value), 10, left: true)) "
                    + "\(pad(formatNumber(row.value), 10, left: true)) \(pad(row.unit, 9)) "
                    + "\(pad(changeText, 8, left: true))\(pad(judgement, 7))  \(verdict)")
        }
        for row in old.rows where !seen.contains(row.key) {
            lines.append(
                "\(pad(row.key, 64)) \(pad(formatNumber(row.value), 10, left: true)) \(pad("—", 10, left: true)) \(row.unit)  row gone"
            )
        }
        return lines
    }

    /// What each run's own yardsticks say about the two machines: the
    /// calibration loop's fastest single copy (the CPU alone) and the raw
    /// SQLite baselines (plain SQLite on the same disk, in the same run).
    /// When the baselines moved, every absolute figure moved with the
    /// machine; a ratio's two sides ran on one machine and did not.
    func machineComparison(with old: ResultsFile, oldName: String) -> String? {
        var parts = [String]()
        if let here = noise?.calibrations.map(\.single).min(), let before = old.noise?.calibrations.map(\.single).min()
        {
            parts.append(
                "the calibration loop alone took \(formatNumber(here)) ms here, \(formatNumber(before)) ms there")
        }
        let speeds = Samples(
            values: rows.compactMap { row in
                guard Self.isRawSQLiteBaseline(row), let before = old.row(row.key), before.value > 0, row.value > 0
                else { return nil }
                return row.value / before.value
            })
        if !speeds.values.isEmpty {
            parts.append(
                "raw SQLite ran at \(formatNumber(speeds.median))× its speed there (median of \(speeds.values.count) "
                    + "baseline rows, \(formatNumber(speeds.min))–\(formatNumber(speeds.max))×)")
        }
        guard !parts.isEmpty else { return nil }
        var line = "machines, against \(oldName): " + parts.joined(separator: "; ")
        if abs(speeds.median - 1) > 0.15 {
            line += " — absolute figures move with the machine; ratios, both sides measured in one run, do not"
        }
        return line
    }

    /// A row spool-bench measures with plain SQLite as a baseline.
    static func isRawSQLiteBaseline(_ row: Row) -> Bool {
        row.unit == "events/s" && row.key.contains("raw-sqlite")
    }

    /// +1 when more is better, -1 when less is, nil when the row does not say.
    static func betterDirection(_ row: Row) -> Int? {
        if let comparison = row.comparison { return comparison == .atLeast ? 1 : -1 }
        switch row.unit {
        case "events/s", "calls/s", "MB/s": return 1
        case "µs", "ms", "MB", "B", "events": return -1
        default: return nil
        }
    }
}
