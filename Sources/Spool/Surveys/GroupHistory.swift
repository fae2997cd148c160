import SpoolStorage

/// History counts inside one group's transaction, where they cannot change:
/// each name, filter and window start (to the millisecond) is counted once
/// per rule threshold, however many of the group's events ask; once a
/// count reaches its cap from some window start, every earlier start (the
/// events before, whose windows reach further back) has at least as many;
/// and once the history holds none from the start of the widest window the
/// group's events open, none of them counts any.
final class GroupHistoryCounts {
    private struct Counted: Hashable {
        let name: String
        let filter: PropertyFilter?
    }

    private struct Key: Hashable {
        let counted: Counted
        let since: Double?
    }

    /// What the counts read so far settle for a name and filter at any event.
    private struct Settled {
        /// The latest window start from which a count reached its cap, that
        /// count, and the group's occurrences of the name.
        var reached: (since: Double, count: Int, inGroup: Int)?
        /// A window start from which the history, the group included, holds
        /// no occurrence (nil: none known).
        var noneFrom: Double?
        /// Whether the widest window was counted.
        var widestCounted = false
    }

    private let connection: Connection
    private var known: [Key: (count: Int, cap: Int)] = [:]
    private var settled: [Counted: Settled] = [:]
    /// Each name's occurrences in the group: the most a rule's cap grows by
    /// from one event to another (it adds the occurrences after the event).
    private let inGroup: [String: Int]
    /// The time of the group's earliest event: a window at any event starts
    /// no earlier than the same window at it.
    let earliest: Double

    init(_ connection: Connection, events: [StoredEvent]) {
        self.connection = connection
        inGroup = events.reduce(into: [:]) { counts, event in
            if LaterOccurrences.entersHistory(event) { counts[event.name, default: 0] += 1 }
        }
        earliest = events.lazy.map(\.recordedAt).min() ?? 0
    }

    /// The count up to any event of the group, when the counts already
    /// read settle it from `since`: `cap` when the history holds `cap`
    /// occurrences besides all of the group's, 0 when it holds none. One
    /// lookup: a rule whose count is long past its N, or whose filter
    /// passes nothing in the widest window, costs no more at the group's
    /// other events.
    func settled(_ cap: Int, of name: String, where filter: PropertyFilter?, since: Double?) -> Int? {
        guard let settled = settled[Counted(name: name, filter: filter)] else { return nil }
        let start = since.map(HistoryMillisecond.of) ?? -.infinity
        if let reached = settled.reached, start <= reached.since, reached.count - reached.inGroup >= cap { return cap }
        if let noneFrom = settled.noneFrom, start >= noneFrom { return 0 }
        return nil
    }

    /// ``HistoryAsOf/count(of:where:since:until:cap:in:)`` through the end
    /// of the log. With `widest` (the start of the same window at the
    /// group's earliest event), the first count of a name and filter asks
    /// whether the history holds any from there: when it holds none, no
    /// event of the group counts any (``settled(_:of:where:since:)``).
    func count(of name: String, where filter: PropertyFilter?, since: Double?, widest: Double?, cap: Int) throws
        -> Int
    {
        let counted = Counted(name: name, filter: filter)
        let start = since.map(HistoryMillisecond.of) ?? -.infinity
        if let reached = settled[counted]?.reached, start <= reached.since, cap <= reached.count { return cap }
        if let widest, settled[counted]?.widestCounted != true {
            let widestStart = min(start, HistoryMillisecond.of(widest))
            let any = try HistoryAsOf.count(
                of: name, where: filter, since: widestStart, until: nil, cap: 1, in: connection)
            settled[counted, default: Settled()].widestCounted = true
            if any == 0 {
                settled[counted, default: Settled()].noneFrom = widestStart
                return 0
            }
        }
        let key = Key(counted: counted, since: since.map(HistoryMillisecond.of))
        // A count below its cap is exact; one at its cap answers any smaller cap.
        if let known = known[key], known.count < known.cap || cap <= known.cap { return min(known.count, cap) }
        // Count far enough for every event of the group at once: counting
        // each event's cap anew would scan the history once per event
        // (seconds per group for a rule on a name with a long history).
        let extra = inGroup[name, default: 0]
        let asked = cap > Int.max - extra ? Int.max : cap + extra
        let count = try HistoryAsOf.count(of: name, where: filter, since: since, until: nil, cap: asked, in: connection)
        known[key] = (count, asked)
        if count >= asked, settled[counted]?.reached.map({ start > $0.since || count > $0.count }) ?? true {
            settled[counted, default: Settled()].reached = (start, count, extra)
        }
        return min(count, cap)
    }
}

/// Occurrences after an event in its commit group, per name: what the
/// history already counts but the event must not. Filled from the last
/// event of the group back to the first, as the group's events are
/// evaluated.
final class LaterOccurrences {
    private let events: [StoredEvent]
    /// The events after this index are counted.
    private var index: Int
    private var counts: [String: Int] = [:]
    /// The earliest and latest millisecond among each name's counted events.
    private var spans: [String: (earliest: Double, latest: Double)] = [:]
    /// Counted events that pass each filter asked about so far, by name.
    private var filtered: [String: [PropertyFilter: Int]] = [:]

    init(_ events: [StoredEvent]) {
        self.events = events
        index = events.count - 1
    }

    /// Counts the event at the current index, which comes before every
    /// event counted so far; the next evaluation is at the one before it.
    func addCurrent() {
        let event = events[index]
        index -= 1
        guard Self.entersHistory(event) else { return }
        counts[event.name, default: 0] += 1
        let millisecond = HistoryMillisecond.of(event.recordedAt)
        let span = spans[event.name]
        spans[event.name] = (
            min(span?.earliest ?? millisecond, millisecond), max(span?.latest ?? millisecond, millisecond)
        )
        if var counts = filtered[event.name] {
            for (filter, count) in counts where Self.passes(event, filter) { counts[filter] = count + 1 }
            filtered[event.name] = counts
        }
    }

    /// How many of `name` (passing `filter`) follow the event being
    /// evaluated, from the millisecond of `since` on (nil: all of them), as
    /// the history counts them.
    func count(of name: String, where filter: PropertyFilter?, since: Double?) -> Int {
        guard let span = spans[name] else { return 0 }
        if let since, HistoryMillisecond.of(since) > span.earliest {
            // A later event older than the window (a clock set back): count exactly.
            return exactly(name, filter, from: HistoryMillisecond.of(since), to: .infinity)
        }
        guard let filter else { return counts[name, default: 0] }
        if let known = filtered[name]?[filter] { return known }
        let count = exactly(name, filter, from: -.infinity, to: .infinity)
        filtered[name, default: [:]][filter] = count
        return count
    }

    /// How many of `name` follow the event being evaluated in the
    /// milliseconds from `from` (rounded down to its millisecond) through
    /// `to`.
    func count(of name: String, from: Double, to: Double) -> Int {
        guard let span = spans[name] else { return 0 }
        let first = HistoryMillisecond.of(from)
        if first <= span.earliest && span.latest <= to { return counts[name, default: 0] }
        if to < span.earliest || first > span.latest { return 0 }
        return exactly(name, nil, from: first, to: to)
    }

    private func exactly(_ name: String, _ filter: PropertyFilter?, from: Double, to: Double) -> Int {
        events[(index + 1)...].reduce(0) { total, event in
            guard event.name == name, Self.entersHistory(event) else { return total }
            let millisecond = HistoryMillisecond.of(event.recordedAt)
            guard millisecond >= from && millisecond <= to, filter.map({ Self.passes(event, $0) }) ?? true else {
                return total
            }
            return total + 1
        }
    }

    /// Whether the event added an occurrence to the history: a `track`
    /// (survey lifecycle events and `session_start` included) other than
    /// the heartbeat.
    static func entersHistory(_ event: StoredEvent) -> Bool {
        event.type == EventRecord.track && ReservedEventName.entersHistory(event.name)
    }

    /// Whether the value its occurrence kept for the filter's property
    /// passes (an event recorded before a survey declared the property kept
    /// none, and the history holds none for it).
    private static func passes(_ event: StoredEvent, _ filter: PropertyFilter) -> Bool {
        filter.match.matches(event.historyValues?.value(of: filter.property))
    }
}
