import Foundation

/// The SVG report (`--svg FILE`): a page of small plots drawn from one
/// results file, each naming the target it is judged against.
struct SVGReport {
    let results: ResultsFile

    init(_ results: ResultsFile) { self.results = results }

    static let width = 1000.0
    static let panelWidth = 484.0
    static let panelHeight = 330.0

    func write(to path: String) throws {
        try render().write(toFile: path, atomically: true, encoding: .utf8)
    }

    func render() -> String {
        var svg = SVG()
        let judged = results.rows.filter { $0.target != nil }
        let headroomHeight = 96 + Double(judged.count) * 19
        let grid = 118.0
        let height = grid + 3 * (Self.panelHeight + 12) + headroomHeight + 16
        header(&svg)
        let column = [10.0, 10 + Self.panelWidth + 12]
        func panel(_ index: Int, _ title: String, _ target: String) -> Panel {
            Panel(
                x: column[index % 2], y: grid + Double(index / 2) * (Self.panelHeight + 12), width: Self.panelWidth,
                height: Self.panelHeight, title: title, target: target)
        }
        throughput(
            &svg,
            panel(
                0, "Throughput against backlog size",
                "Targets: append cost at 1M ≤ 1.2× at 10k; record ≥ 1.0× raw insert"))
        memory(
            &svg,
            panel(
                1, "Resident memory over a record() burst",
                "Target: Spool's share (RSS minus before opening) ≤ 10 MB at 1M"))
        latency(&svg, panel(2, "record → listener latency at 10k events/s", "Target: p99 ≤ 1 ms"))
        shares(
            &svg,
            panel(
                3, "Spool's own memory (peak RSS minus before opening)",
                "Targets: ≤ 10 MB at a 1M backlog and in a 1M burst; ≤ 15 MB uploading"))
        drainByFormat(
            &svg, panel(4, "Drain throughput by body format", "Target: identity drain ≥ 0.7× the raw SQLite drain"))
        bytesByFormat(
            &svg, panel(5, "Bytes on the wire per event", "Target: none; gzip is the default for Spool and Segment"))
        headroom(
            &svg,
            Panel(
                x: 10, y: grid + 3 * (Self.panelHeight + 12), width: Self.width - 20, height: headroomHeight,
                title: "Every target: how far this run is from it",
                target:
                    "Right of the red line meets the target (value ÷ target for ≥, target ÷ value for ≤); bars: the ratio's interval"
            ),
            judged)
        return """
            <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(Self.width))" height="\(Int(height))" \
            viewBox="0 0 \(Int(Self.width)) \(Int(height))" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">
            <rect width="100%" height="100%" fill="#f7f7f7"/>
            \(svg.body)</svg>

            """
    }

    func header(_ svg: inout SVG) {
        svg.text("spool-bench report", 12, 30, size: 20, bold: true)
        svg.text(
            "\(results.date) · \(results.quick ? "--quick · " : "")\(results.cores) cores · SQLite \(results.sqliteVersion) · results schema \(results.schemaVersion ?? 1)",
            12, 52, size: 13, color: "#333")
        let noise = results.noise?.line ?? "machine: not classified (results schema 1)"
        for (index, line) in wrap(noise, 150).prefix(2).enumerated() {
            svg.text(
                line, 12, 72 + Double(index) * 17, size: 12.5,
                color: results.noise?.quiet == false ? Palette.vermillion : "#333")
        }
        let judged = results.rows.compactMap { $0.verdict ?? $0.computedVerdict }
        let failed = judged.filter { $0 == .fail }.count
        let inconclusive = judged.filter { $0 == .inconclusive }.count
        svg.text(
            "\(judged.count - failed - inconclusive) of \(judged.count) targets met, \(failed) FAIL, "
                + "\(inconclusive) inconclusive (noisy): the last plot names each", 12, 108, size: 13, bold: true)
    }

    // MARK: - Plots

    func throughput(_ svg: inout SVG, _ panel: Panel) {
        let lines: [(String, String, String?)] = [
            ("curves/append", Palette.blue, nil), ("curves/record", Palette.vermillion, nil),
            ("curves/drain", Palette.green, nil), ("curves/raw-insert", Palette.grey, "7 4"),
            ("curves/raw-drain", Palette.grey, "2 3"),
        ]
        let series = lines.compactMap { id, color, dash in results.series(id).map { ($0, color, dash) } }
        let panel = panel.withLegend(series.map { ($0.0.name, $0.1, $0.2) })
        panel.frame(&svg)
        guard !series.isEmpty else { return panel.missing(&svg, "--only curves") }
        let xs = series.flatMap { $0.0.points.map { $0[0] } }
        let ys = series.flatMap { $0.0.points.map { $0[1] } }
        let x = panel.xScale(max(1_000, xs.min() ?? 10_000), xs.max() ?? 1_000_000, logarithmic: true)
        let (low, high) = Scale.rounded(up: ys.max() ?? 1)
        let y = panel.yScale(low, high)
        panel.axes(&svg, x: x, y: y, xLabel: "events in the log (backlog), log scale", yLabel: "events/s")
        for (series, color, dash) in series {
            svg.polyline(
                series.points.map { (x($0[0]), y($0[1])) }, color: color, width: dash == nil ? 2.5 : 2, dash: dash)
        }
        panel.legend(&svg, series.map { ($0.0.name, $0.1, $0.2) })
    }

    func memory(_ svg: inout SVG, _ panel: Panel) {
        let bursts = (results.series ?? []).filter { $0.id.hasPrefix("burst/rss-") }
        guard let burst = bursts.max(by: { ($0.points.last?[0] ?? 0) < ($1.points.last?[0] ?? 0) }),
            let before = burst.points.first?[1], !before.isNaN
        else {
            panel.frame(&svg)
            return panel.missing(&svg, "--only burst (Linux: /proc/self/status)")
        }
        let legend: [Panel.LegendItem] = [
            (burst.name, Palette.blue, nil), ("before opening: \(formatNumber(before)) MB", Palette.grey, "6 4"),
            ("target: before opening + 10 MB", Palette.target, "6 4"),
        ]
        let panel = panel.withLegend(legend)
        panel.frame(&svg)
        let x = panel.xScale(0, burst.points.last?[0] ?? 1)
        let (low, high) = Scale.rounded(up: max(burst.points.map { $0[1] }.max() ?? 0, before + 10) * 1.05)
        let y = panel.yScale(low, high)
        panel.axes(&svg, x: x, y: y, xLabel: "record() calls so far", yLabel: "resident memory (MB)")
        svg.line(panel.left, y(before), panel.right, y(before), color: Palette.grey, width: 1.5, dash: "6 4")
        svg.line(
            panel.left, y(before + 10), panel.right, y(before + 10), color: Palette.target, width: 1.5, dash: "6 4")
        svg.polyline(burst.points.map { (x($0[0]), y($0[1])) }, color: Palette.blue, width: 2.5)
        panel.legend(&svg, legend)
    }

    func latency(_ svg: inout SVG, _ panel: Panel) {
        guard let series = results.series("listen/latency-percentiles"), !series.points.isEmpty else {
            panel.frame(&svg)
            return panel.missing(&svg, "--only listen")
        }
        let p99 = series.points.first { abs($0[0] - 99) < 0.001 }?[1] ?? .nan
        let legend: [Panel.LegendItem] = [
            ("latency at each percentile; p99 \(formatNumber(p99)) ms", Palette.blue, nil),
            ("target: p99 ≤ 1 ms", Palette.target, "6 4"),
        ]
        let panel = panel.withLegend(legend)
        panel.frame(&svg)
        // The percentile axis in nines: 0, 90, 99, 99.9, 99.99 evenly apart.
        func nines(_ percentile: Double) -> Double { -log10(max(1e-5, 1 - min(percentile, 99.999) / 100)) }
        let x = panel.xScale(0, 4.3)
        let values = series.points.map { $0[1] }.filter { $0 > 0 }
        let y = panel.yScale(
            pow(10, floor(log10(min(values.min() ?? 0.01, 0.5)))), pow(10, ceil(log10(max(values.max() ?? 1, 2)))),
            logarithmic: true)
        let ticks: [(Double, String)] = [(0, "0"), (1, "90"), (2, "99"), (3, "99.9"), (4, "99.99")].map {
            (x($0.0), $0.1)
        }
        panel.axes(
            &svg, x: nil, y: y, xLabel: "percentile (the slowest event at the right edge)",
            yLabel: "latency (ms), log scale", xTicks: ticks)
        svg.line(panel.left, y(1), panel.right, y(1), color: Palette.target, width: 1.5, dash: "6 4")
        svg.line(x(2), panel.top, x(2), panel.bottom, color: Palette.target, width: 1, dash: "2 3")
        let points = series.points.map { (x($0[0] >= 100 ? 4.3 : nines($0[0])), y(max($0[1], y.low))) }
        svg.polyline(points, color: Palette.blue, width: 2.5)
        for point in points { svg.circle(point.0, point.1, radius: 3, fill: Palette.blue) }
        panel.legend(&svg, legend)
    }

    func shares(_ svg: inout SVG, _ panel: Panel) {
        let rows = results.rows.filter { $0.name.hasPrefix("Spool's share of RSS") && !$0.value.isNaN }
        bars(
            &svg, panel, rows.map { (shortLabel($0), [$0.value], $0.target) },
            series: [("Spool's share", Palette.blue)],
            yLabel: "MB", missing: "--only append, burst or upload (Linux: /proc/self/status)")
    }

    func drainByFormat(_ svg: inout SVG, _ panel: Panel) {
        let formats = ["Spool", "Segment", "Kafka REST"]
        let raw = Samples(values: formats.compactMap { row("upload", "raw SQLite drain (beside \($0))")?.value }).median
        let groups = formats.compactMap { label -> (String, [Double], Double?)? in
            guard let identity = row("upload", "\(label) drain, 100/batch, identity") else { return nil }
            let gzip = row("upload", "\(label) drain, gzip")?.value ?? .nan
            return (label, [identity.value, gzip], raw.isNaN ? nil : raw * 0.7)
        }
        bars(
            &svg, panel, groups, series: [("identity", Palette.blue), ("gzip", Palette.orange)], yLabel: "events/s",
            missing: "--only upload or drain", reference: raw.isNaN ? nil : ("raw SQLite drain", raw))
    }

    func bytesByFormat(_ svg: inout SVG, _ panel: Panel) {
        let groups = ["Spool", "Segment", "Kafka REST"].compactMap { label -> (String, [Double], Double?)? in
            guard let raw = row("upload", "\(label) bytes on the wire per event, raw") else { return nil }
            return (
                label, [raw.value, row("upload", "\(label) bytes on the wire per event, gzipped")?.value ?? .nan], nil
            )
        }
        bars(
            &svg, panel, groups, series: [("raw", Palette.blue), ("gzipped", Palette.orange)],
            yLabel: "bytes per event", missing: "--only upload or drain")
    }

    func row(_ area: String, _ name: String) -> Row? { results.row(Row.key(area: area, name: name)) }

    /// "1M|backlog", "1M|burst", "upload|Spool|gzip": what a memory-share
    /// row measured, in a few words, one line each.
    func shortLabel(_ row: Row) -> String {
        let name = row.name
        if name.contains("backlog") { return "1M|backlog" }
        let words = name.split(separator: " ")
        if let index = words.firstIndex(of: "unthrottled"), index > 0 { return "\(words[index - 1])|burst" }
        let format = name.contains("Segment") ? "Segment" : "Spool"
        return "upload|\(format)|\(name.hasSuffix("identity") ? "identity" : "gzip")"
    }
}

func wrap(_ text: String, _ width: Int) -> [String] {
    var lines: [String] = []
    var current = ""
    for word in text.split(separator: " ") {
        if current.count + word.count + 1 > width, !current.isEmpty {
            lines.append(current)
            current = ""
        }
        current += (current.isEmpty ? "" : " ") + word
    }
    if !current.isEmpty { lines.append(current) }
    return lines
}
