import Foundation

/// `spool-bench --self-test`: checks the parts that decide a verdict or read
/// a results file — the median's interval, the verdict rules, row ids, a
/// version-1 file, `--compare` and the SVG report — on made-up rows, in a
/// second, without measuring anything. Exits 1 on the first failure.
enum SelfTest {
    static func run() throws {
        var failures = 0
        func check(_ condition: Bool, _ what: String) {
            if !condition {
                failures += 1
                print("self-test FAILED: \(what)")
            }
        }

        // The median's interval: min…max below six samples, inner order
        // statistics from nine on.
        let five = Samples(values: [5, 1, 4, 2, 3])
        check(five.medianInterval == (1, 5), "five samples: the interval is min…max")
        let nine = Samples(values: [9, 1, 8, 2, 7, 3, 6, 4, 5])
        check(nine.medianInterval == (2, 8), "nine samples: the 2nd and 8th")
        let thirteen = Samples(values: (1...13).reversed().map(Double.init))
        check(thirteen.medianInterval == (3, 11), "thirteen samples: the 3rd and 11th (P(B ≤ 3) = 4.6% > 2.5%)")
        let twenty = Samples(values: (1...20).map(Double.init))
        check(twenty.medianInterval == (6, 15), "twenty samples: the 6th and 15th")

        // Verdicts.
        func ratio(_ value: Double, _ low: Double, _ high: Double, others: Double) -> Row {
            Row(
                area: "t", name: "ratio", value: value, unit: "×", target: 1, comparison: .atLeast, low: low,
                high: high, rounds: 7, othersShare: others)
        }
        check(
            ratio(1.2, 1.1, 1.3, others: 0.9).computedVerdict == .pass, "an interval wholly above: PASS, noisy or not")
        check(ratio(0.8, 0.78, 0.82, others: 0.01).computedVerdict == .fail, "quiet, tight, below: FAIL")
        check(
            ratio(0.8, 0.78, 0.82, others: 0.5).computedVerdict == .inconclusive,
            "noisy and below: inconclusive, not FAIL")
        check(
            ratio(0.98, 0.7, 1.3, others: 0.01).computedVerdict == .inconclusive,
            "quiet but the rounds disagree across the target: inconclusive")
        check(ratio(0.5, 0.3, 0.7, others: 0.01).computedVerdict == .fail, "quiet, wide but wholly below: FAIL")
        check(ratio(1.02, 0.98, 1.05, others: 0.5).computedVerdict == .pass, "noisy, tight, median above: PASS")
        // More rounds: only while they could change the verdict.
        let below = Comparison(ratios: [0.4, 0.55, 0.45])
        check(!below.needsMoreRounds(0.7, othersShare: 0.01), "quiet, wide, wholly below: no more rounds")
        check(below.needsMoreRounds(0.7, othersShare: 0.5), "noisy, wide, below: more rounds")
        check(
            Comparison(ratios: [0.6, 0.75, 0.65]).needsMoreRounds(0.7, othersShare: 0.01), "quiet, across: more rounds")
        check(!Comparison(ratios: [0.6, 0.62, 0.61]).needsMoreRounds(0.7, othersShare: 0.5), "tight: no more rounds")
        var memory = Row(
            area: "t", name: "memory", value: 12, unit: "MB", target: 10, comparison: .atMost, exact: true,
            othersShare: 0.9)
        check(memory.computedVerdict == .fail, "memory misses its target whatever the noise")
        memory.value = 9
        check(memory.computedVerdict == .pass, "memory under its target passes")
        let single = Row(
            area: "t", name: "p99", value: 2.5, unit: "ms", target: 1, comparison: .atMost, othersShare: 0.6)
        check(single.computedVerdict == .inconclusive, "a timing missed on a busy machine: inconclusive")

        // Ids, and a version-1 file compared with a version-2 one.
        check(
            Row.key(area: "burst", name: "Spool's share of RSS, 1M unthrottled record() calls")
                == "burst/spools-share-of-rss-1m-unthrottled-record-calls", "a row's id")
        let scratch = Scratch("self-test")
        let old = scratch.url.appendingPathComponent("old.json").path
        try Data(
            #"{"date":"d","quick":false,"cores":2,"sqliteVersion":"3","rows":[{"area":"record","name":"ratio record / raw SQLite","value":0.8,"unit":"×","detail":"","target":0.7,"comparison":"≥"},{"area":"record","name":"raw SQLite insert of the same JSON (baseline)","value":200000,"unit":"events/s","detail":""}]}"#
                .utf8
        ).write(to: URL(fileURLWithPath: old))
        let version1 = try ResultsFile.read(old)
        check(
            version1.schemaVersion == nil && version1.rows[0].key == "record/ratio-record-raw-sqlite",
            "a version-1 file")
        let new = ResultsFile(
            date: "e", quick: false, cores: 2, sqliteVersion: "3", noise: nil,
            rows: [
                ratio(1.0, 0.95, 1.05, others: 0).renamed("record", "ratio record / raw SQLite"),
                Row(
                    area: "record", name: "raw SQLite insert of the same JSON (baseline)", value: 100_000,
                    unit: "events/s"),
            ], series: [])
        let lines = new.comparison(with: version1, oldName: "old.json")
        check(lines.contains { $0.contains("record/ratio-record-raw-sqlite") && $0.contains("+25.0%") }, "--compare")
        check(
            lines.contains {
                $0.hasPrefix("machines, against old.json: raw SQLite ran at 0.5") && $0.contains("ratios")
            },
            "--compare: a slower machine's baselines")
        let svg = SVGReport(new).render()
        check(svg.hasPrefix("<svg") && svg.contains("ratio record / raw SQLite"), "the SVG report")

        print(failures == 0 ? "self-test: all checks passed" : "self-test: \(failures) failed")
        if failures > 0 { exit(1) }
    }
}

extension Row {
    fileprivate func renamed(_ area: String, _ name: String) -> Row {
        var row = self
        row.area = area
        row.name = name
        return row
    }
}
