import Foundation

extension SVGReport {
    /// Grouped bars: one group per label (lines split at "|"), one bar per series, each group's
    /// target as a red dashed line across it, and an optional reference line.
    func bars(
        _ svg: inout SVG, _ panel: Panel, _ groups: [(String, [Double], Double?)], series: [(String, String)],
        yLabel: String, missing: String, reference: (String, Double)? = nil
    ) {
        var legend: [Panel.LegendItem] = series.map { ($0.0, $0.1, nil) }
        if let reference { legend.append(("\(reference.0): \(compactNumber(reference.1))", Palette.grey, "2 3")) }
        if groups.contains(where: { $0.2 != nil }) { legend.append(("target", Palette.target, "6 4")) }
        let panel = panel.withLegend(legend)
        panel.frame(&svg)
        guard !groups.isEmpty else { return panel.missing(&svg, missing) }
        let top = (groups.flatMap { $0.1 } + groups.compactMap { $0.2 } + [reference?.1 ?? 0]).filter { !$0.isNaN }
            .max()
        let (low, high) = Scale.rounded(up: (top ?? 1) * 1.12)
        let y = panel.yScale(low, high)
        panel.axes(&svg, x: nil, y: y, xLabel: "", yLabel: yLabel)
        let slot = (panel.right - panel.left) / Double(groups.count)
        let barWidth = min(56, slot * 0.72 / Double(series.count))
        for (index, (label, values, target)) in groups.enumerated() {
            let center = panel.left + slot * (Double(index) + 0.5)
            let start = center - barWidth * Double(series.count) / 2
            for (barIndex, value) in values.enumerated() where !value.isNaN {
                let barX = start + Double(barIndex) * barWidth
                svg.rect(barX + 2, y(value), barWidth - 4, panel.bottom - y(value), fill: series[barIndex].1)
                svg.text(compactNumber(value), barX + barWidth / 2, y(value) - 5, anchor: "middle", color: "#222")
            }
            if let target {
                svg.line(
                    center - slot * 0.45, y(target), center + slot * 0.45, y(target), color: Palette.target,
                    width: 2, dash: "6 4")
            }
            for (line, text) in label.split(separator: "|").prefix(3).enumerated() {
                svg.text(String(text), center, panel.bottom + 16 + Double(line) * 13.5, anchor: "middle")
            }
        }
        if let reference {
            svg.line(
                panel.left, y(reference.1), panel.right, y(reference.1), color: Palette.grey, width: 1.5,
                dash: "2 3")
        }
        panel.legend(&svg, legend)
    }

    /// Each judged row as value ÷ target (or target ÷ value for an upper
    /// bound) on a log scale, with its interval and verdict.
    func headroom(_ svg: inout SVG, _ panel: Panel, _ rows: [Row]) {
        panel.frame(&svg)
        let labelRight = panel.x + 450
        let plotLeft = labelRight + 10
        let plotRight = panel.x + panel.width - 300
        let top = panel.y + 70
        let x = Scale(low: 0.25, high: 4, logarithmic: true, from: plotLeft, to: plotRight)
        func headroom(_ value: Double, _ row: Row) -> Double {
            guard let target = row.target else { return .nan }
            if target == 0 { return value <= 0 ? 4 : 0.25 }
            return row.comparison == .atLeast ? value / target : target / value
        }
        let bottom = top + Double(rows.count) * 19
        for tick in [0.25, 0.5, 1, 2, 4] {
            svg.line(
                x(tick), top - 6, x(tick), bottom, color: tick == 1 ? Palette.target : "#e0e0e0",
                width: tick == 1 ? 2 : 1)
            svg.text(
                tick == 1 ? "1 (target)" : compactNumber(tick) + "×", x(tick), top - 12, anchor: "middle",
                color: tick == 1 ? Palette.target : "#333")
        }
        svg.text("headroom, log scale", (plotLeft + plotRight) / 2, bottom + 20, anchor: "middle", color: "#333")
        for (index, row) in rows.enumerated() {
            let rowY = top + 12 + Double(index) * 19
            if index % 2 == 0 { svg.rect(panel.x + 4, rowY - 13, panel.width - 8, 19, fill: "#f3f6fa") }
            svg.text(Self.shortened("\(row.area): \(row.name)", 66), labelRight, rowY, anchor: "end")
            let color: String
            switch row.verdict ?? row.computedVerdict {
            case .pass?: color = Palette.green
            case .fail?: color = Palette.vermillion
            default: color = Palette.orange
            }
            let clamp = { (value: Double) in min(4, max(0.25, value.isNaN ? 0.25 : value)) }
            if let low = row.low, let high = row.high {
                let ends = [headroom(low, row), headroom(high, row)].map(clamp)
                svg.line(x(ends[0]), rowY - 4, x(ends[1]), rowY - 4, color: color, width: 3)
            }
            svg.circle(x(clamp(headroom(row.value, row))), rowY - 4, radius: 5, fill: color)
            let verdict = (row.verdict ?? row.computedVerdict)?.rawValue ?? ""
            let target = "\(row.comparison?.rawValue ?? "") \(Self.short(row.target ?? .nan))"
            svg.text(
                "\(Self.short(row.value)) \(row.unit) (\(target)) \(verdict)", plotRight + 10, rowY, color: color)
        }
    }

    /// `formatNumber`, or 667k and 1M from ten thousand up.
    static func short(_ value: Double) -> String {
        abs(value) >= 10_000 ? compactNumber(value) : formatNumber(value)
    }

    /// `text`, or its start and end around "…" when longer than `limit`
    /// characters: row names differ at their ends too.
    static func shortened(_ text: String, _ limit: Int) -> String {
        guard text.count > limit else { return text }
        let keep = (limit - 1) / 2
        return String(text.prefix(limit - 1 - keep)) + "…" + String(text.suffix(keep))
    }
}
