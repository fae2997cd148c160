import Foundation

/// Spool and its baseline measured alternately, round after round, so drift
/// on a noisy machine hits both alike; the ratio is taken per round and
/// judged on the median of those ratios.
///
/// With a target, a comparison takes more rounds while its interval of the
/// median (`Samples.medianInterval`) is wider than `spreadLimitPercent` and
/// reaches below the target (on a quiet machine: straddles it): for at
/// most `extraTime` times what its first rounds took (twice; half with
/// `--quick`), up to four times as many rounds, and only before
/// `Comparison.deadline`.
struct Comparison {
    var spool: [Double] = []
    var baseline: [Double] = []
    var ratios: [Double] = []
    /// Other processes' share of the CPU over all the rounds.
    var othersShare: Double?

    /// No extra rounds start after this (monotonic nanoseconds): the run's
    /// time budget (`--quick` keeps its minute).
    nonisolated(unsafe) static var deadline = UInt64.max
    nonisolated(unsafe) static var extraTime = 2.0

    static func measure(
        rounds: Int, target: Double? = nil, spool: () async throws -> Double,
        baseline: () async throws -> Double
    ) async rethrows -> Comparison {
        var comparison = Comparison()
        let window = MachineSnapshot.take()
        let start = now()
        func round() async throws {
            let s = try await spool()
            let b = try await baseline()
            comparison.spool.append(s)
            comparison.baseline.append(b)
            comparison.ratios.append(s / b)
        }
        for _ in 0..<rounds { try await round() }
        let first = now() - start
        if let target {
            while comparison.needsMoreRounds(target, othersShare: window.othersShare()),
                comparison.ratios.count < rounds * 4,
                Double(now() - start) < Double(first) * (1 + extraTime), now() < deadline
            {
                try await round()
            }
        }
        comparison.othersShare = window.othersShare()
        return comparison
    }

    /// The interval of the median ratio is wide and reaches below `target`;
    /// on a quiet machine (others took less than `noisyShare` of the CPU so
    /// far), only while it straddles `target`: an interval wholly below it
    /// is a failure however wide (see `Row.computedVerdict`).
    func needsMoreRounds(_ target: Double, othersShare: Double?) -> Bool {
        let samples = Samples(values: ratios)
        let interval = samples.medianInterval
        guard samples.intervalPercent > spreadLimitPercent, interval.low < target else { return false }
        return (othersShare ?? 0) >= noisyShare || interval.high >= target
    }
}

extension Report {
    /// Three rows: Spool's median, the baseline's median, and the median of
    /// the per-round ratios against `target` (at least), with its interval.
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
                    .joined(separator: ", "), othersShare: comparison.othersShare))
        add(
            Row(
                area: area, name: baseline, value: baselineSamples.median, unit: unit,
                detail: [baselineDetail, "spread \(formatNumber(baselineSamples.spreadPercent))%"]
                    .filter { !$0.isEmpty }.joined(separator: ", "), othersShare: comparison.othersShare))
        add(ratioRow(comparison, area: area, name: ratio, target: target))
    }

    /// The median of the per-round ratios, its interval and the noise.
    func ratioRow(_ comparison: Comparison, area: String, name: String, target: Double?) -> Row {
        let ratios = Samples(values: comparison.ratios)
        let interval = ratios.medianInterval
        return Row(
            area: area, name: name, value: ratios.median, unit: "×",
            detail:
                "median of \(comparison.ratios.count) per-round ratios, interval \(formatNumber(interval.low))–\(formatNumber(interval.high)) (\(formatNumber(ratios.intervalPercent))%)",
            target: target, comparison: target == nil ? nil : .atLeast, low: interval.low, high: interval.high,
            rounds: comparison.ratios.count, othersShare: comparison.othersShare)
    }
}
