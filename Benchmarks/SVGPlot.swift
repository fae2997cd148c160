import Foundation

// Plot primitives for the SVG report: a text buffer of SVG elements, linear
// and logarithmic scales with readable ticks, and a panel (title, target,
// axes, legend). Sizes are in pixels at 100% zoom; no text is under 12 px.

struct SVG {
    var body = ""

    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }

    static func number(_ value: Double) -> String { String(format: "%.1f", value) }

    mutating func text(
        _ text: String, _ x: Double, _ y: Double, size: Double = 12, anchor: String = "start", bold: Bool = false,
        color: String = "#222", rotate: Bool = false
    ) {
        let transform = rotate ? " transform=\"rotate(-90 \(Self.number(x)) \(Self.number(y)))\"" : ""
        body +=
            "<text x=\"\(Self.number(x))\" y=\"\(Self.number(y))\" font-size=\"\(Self.number(size))\" text-anchor=\"\(anchor)\""
            + (bold ? " font-weight=\"bold\"" : "") + " fill=\"\(color)\"\(transform)>\(Self.escape(text))</text>\n"
    }

    mutating func line(
        _ x1: Double, _ y1: Double, _ x2: Double, _ y2: Double, color: String = "#222", width: Double = 1,
        dash: String? = nil
    ) {
        body +=
            "<line x1=\"\(Self.number(x1))\" y1=\"\(Self.number(y1))\" x2=\"\(Self.number(x2))\" y2=\"\(Self.number(y2))\" stroke=\"\(color)\" stroke-width=\"\(Self.number(width))\""
            + (dash.map { " stroke-dasharray=\"\($0)\"" } ?? "") + "/>\n"
    }

    mutating func rect(
        _ x: Double, _ y: Double, _ width: Double, _ height: Double, fill: String, stroke: String? = nil
    ) {
        body +=
            "<rect x=\"\(Self.number(x))\" y=\"\(Self.number(y))\" width=\"\(Self.number(max(0, width)))\" height=\"\(Self.number(max(0, height)))\" fill=\"\(fill)\""
            + (stroke.map { " stroke=\"\($0)\"" } ?? "") + "/>\n"
    }

    mutating func polyline(_ points: [(Double, Double)], color: String, width: Double = 2, dash: String? = nil) {
        guard !points.isEmpty else { return }
        let coordinates = points.map { "\(Self.number($0.0)),\(Self.number($0.1))" }.joined(separator: " ")
        body +=
            "<polyline points=\"\(coordinates)\" fill=\"none\" stroke=\"\(color)\" stroke-width=\"\(Self.number(width))\" stroke-linejoin=\"round\""
            + (dash.map { " stroke-dasharray=\"\($0)\"" } ?? "") + "/>\n"
    }

    mutating func circle(_ x: Double, _ y: Double, radius: Double, fill: String) {
        body +=
            "<circle cx=\"\(Self.number(x))\" cy=\"\(Self.number(y))\" r=\"\(Self.number(radius))\" fill=\"\(fill)\"/>\n"
    }
}

/// Colours that stay apart for colour-blind readers (Okabe and Ito).
enum Palette {
    static let blue = "#0072B2"
    static let vermillion = "#D55E00"
    static let green = "#009E73"
    static let purple = "#CC79A7"
    static let orange = "#E69F00"
    static let sky = "#56B4E9"
    static let grey = "#666666"
    static let target = "#C00000"
}

/// Values to pixels along one axis.
struct Scale {
    var low: Double
    var high: Double
    var logarithmic = false
    /// Pixels of `low` and `high`.
    var from: Double
    var to: Double

    func callAsFunction(_ value: Double) -> Double {
        let share =
            logarithmic
            ? (log10(max(value, low)) - log10(low)) / (log10(high) - log10(low))
            : (value - low) / (high - low)
        return from + (to - from) * share
    }

    /// 1-2-5 steps (linear), or each decade with its 2× and 5× when the
    /// range spans under three decades (logarithmic).
    var ticks: [Double] {
        if logarithmic {
            let decades = log10(high) - log10(low)
            var ticks: [Double] = []
            var decade = pow(10, floor(log10(low)))
            while decade <= high * 1.0001 {
                for factor in decades < 3 ? [1.0, 2, 5] : [1.0] where decade * factor >= low * 0.9999 {
                    if decade * factor <= high * 1.0001 { ticks.append(decade * factor) }
                }
                decade *= 10
            }
            return ticks
        }
        let step = Self.niceStep((high - low) / 5)
        return stride(from: (low / step).rounded(.up) * step, through: high + step * 1e-6, by: step).map { $0 }
    }

    static func niceStep(_ raw: Double) -> Double {
        guard raw > 0, raw.isFinite else { return 1 }
        let magnitude = pow(10, floor(log10(raw)))
        return ([1, 2, 2.5, 5, 10].first { $0 * magnitude >= raw } ?? 10) * magnitude
    }

    /// A linear range from 0 (or `minimum`) to a round number above `maximum`.
    static func rounded(up maximum: Double, from minimum: Double = 0) -> (Double, Double) {
        let top = max(maximum * 1.08, minimum + 1e-9)
        let step = niceStep((top - minimum) / 5)
        return (minimum, (top / step).rounded(.up) * step)
    }
}

/// 1.5M, 200k, 12, 0.25: short tick labels.
func compactNumber(_ value: Double) -> String {
    func trimmed(_ number: Double) -> String {
        let text = String(format: number >= 10 ? "%.0f" : "%.1f", number)
        return text.hasSuffix(".0") ? String(text.dropLast(2)) : text
    }
    if abs(value) >= 1e6 { return trimmed(value / 1e6) + "M" }
    if abs(value) >= 1e3 { return trimmed(value / 1e3) + "k" }
    if abs(value) >= 1 || value == 0 { return trimmed(value) }
    return String(format: abs(value) >= 0.1 ? "%.2g" : "%.1g", value)
}

/// One plot's box: a title, the target it is judged against, a plot area
/// with axes, and a legend.
struct Panel {
    var x: Double
    var y: Double
    var width: Double
    var height: Double
    var title: String
    var target: String
    /// Rows of legend between the target and the plot (`withLegend`).
    var legendRows = 0

    var left: Double { x + 64 }
    var right: Double { x + width - 14 }
    var top: Double { y + 62 + Double(legendRows) * 18 }
    var bottom: Double { y + height - 46 }

    func frame(_ svg: inout SVG) {
        svg.rect(x, y, width, height, fill: "#ffffff", stroke: "#d0d0d0")
        svg.text(title, x + 12, y + 22, size: 15, bold: true)
        svg.text(target, x + 12, y + 41, size: 12.5, color: Palette.target)
    }

    func xScale(_ low: Double, _ high: Double, logarithmic: Bool = false) -> Scale {
        Scale(low: low, high: high, logarithmic: logarithmic, from: left, to: right)
    }

    func yScale(_ low: Double, _ high: Double, logarithmic: Bool = false) -> Scale {
        Scale(low: low, high: high, logarithmic: logarithmic, from: bottom, to: top)
    }

    /// Grid, ticks and axis labels; `xTicks` overrides the scale's ticks with
    /// labelled positions.
    func axes(
        _ svg: inout SVG, x: Scale?, y: Scale, xLabel: String, yLabel: String,
        xTicks: [(Double, String)]? = nil, yFormat: (Double) -> String = compactNumber
    ) {
        for tick in y.ticks {
            svg.line(left, y(tick), right, y(tick), color: "#e6e6e6")
            svg.text(yFormat(tick), left - 6, y(tick) + 4, anchor: "end")
        }
        let ticks = xTicks ?? x.map { scale in scale.ticks.map { ($0, compactNumber($0)) } } ?? []
        for (value, label) in ticks {
            let position = x.map { $0(value) } ?? value
            svg.line(position, top, position, bottom, color: "#f0f0f0")
            svg.line(position, bottom, position, bottom + 4, color: "#444")
            svg.text(label, position, bottom + 18, anchor: "middle")
        }
        svg.line(left, bottom, right, bottom, color: "#444")
        svg.line(left, top, left, bottom, color: "#444")
        svg.text(xLabel, (left + right) / 2, xLabelBaseline, anchor: "middle", color: "#333")
        svg.text(yLabel, yLabelCenter, (top + bottom) / 2, anchor: "middle", color: "#333", rotate: true)
    }

    private var xLabelBaseline: Double { bottom + 36 }
    private var yLabelCenter: Double { x + 16 }

    typealias LegendItem = (label: String, color: String, dash: String?)

    /// Where each legend item goes: flowing left to right under the target,
    /// wrapping at the panel's width.
    private func legendPositions(_ items: [LegendItem]) -> [(Double, Double)] {
        var positions: [(Double, Double)] = []
        var itemX = x + 12
        var row = 0
        for item in items {
            let itemWidth = Double(item.label.count) * 6.9 + 44
            if itemX + itemWidth > x + width - 8, itemX > x + 12 {
                row += 1
                itemX = x + 12
            }
            positions.append((itemX, y + 64 + Double(row) * 18))
            itemX += itemWidth
        }
        return positions
    }

    /// The panel with room for `items` as its legend.
    func withLegend(_ items: [LegendItem]) -> Panel {
        var panel = self
        panel.legendRows = (Set(legendPositions(items).map(\.1)).count)
        return panel
    }

    /// Line samples and labels between the target and the plot.
    func legend(_ svg: inout SVG, _ items: [LegendItem]) {
        for (item, (itemX, itemY)) in zip(items, legendPositions(items)) {
            svg.line(itemX, itemY - 4, itemX + 26, itemY - 4, color: item.color, width: 2.5, dash: item.dash)
            svg.text(item.label, itemX + 32, itemY, color: "#222")
        }
    }

    /// A note in the plot area when the run did not measure what it shows.
    func missing(_ svg: inout SVG, _ what: String) {
        svg.text(
            "not in this run: \(what)", (left + right) / 2, (top + bottom) / 2, size: 13, anchor: "middle",
            color: Palette.grey)
    }
}
