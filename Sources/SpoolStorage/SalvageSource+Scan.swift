import CSQLite

// MARK: - Reading a table row by row, from both ends

extension SalvageSource {
    /// Calls `accept` with every row of `table` it can read (`select` lists
    /// the columns after the rowid, which comes first); `accept` returns
    /// whether it took the row.
    ///
    /// Two passes. The first reads up from the lowest rowid; where SQLite
    /// cannot read on, it looks for the first rowid past the failure that
    /// reads again (doubling steps, then halving back) and goes on from
    /// there. The second reads down from the table's last row to the
    /// highest one the first took, stepping over failures the same way, so
    /// the rows after a place the first pass could not step over are read
    /// from the other end.
    ///
    /// A damaged page can hand back cells of garbage that SQLite reads
    /// through, with any rowid. Only a row `accept` takes moves a pass on:
    /// a refused row, or one out of order, is passed over without skipping
    /// the rows after it.
    func scan(_ table: String, select: String, _ accept: (Statement) throws -> Bool) throws -> Scan {
        var scan = Scan()
        guard columns[table] != nil else {
            scan.unreadable = true
            return scan
        }
        let reader = RowReader(source: self, table: table, select: select)
        let highest = try reader.pass(.up, within: Int64.min...Int64.max, &scan, accept)
        if let highest, highest < .max {
            _ = try reader.pass(.down, within: (highest + 1)...Int64.max, &scan, accept)
        } else if highest == nil {
            _ = try reader.pass(.down, within: Int64.min...Int64.max, &scan, accept)
        }
        if scan.accepted == 0 && scan.failures > 0 { scan.unreadable = true }
        return scan
    }
}

/// One table's rows read in one direction at a time, stepping over what
/// cannot be read.
private struct RowReader {
    enum Direction { case up, down }

    let source: SalvageSource
    let table: String
    let select: String

    /// What `accept` threw: writing the fresh file failed, which is no
    /// damage of this one to step over.
    struct NotARead: Error {
        let error: any Error
    }

    private enum Probe { case row, end, failed }

    private func sql(_ direction: Direction, limit: Bool) -> String {
        "SELECT rowid, \(select) FROM \"\(table)\" WHERE rowid BETWEEN ? AND ? ORDER BY rowid"
            + (direction == .up ? "" : " DESC") + (limit ? " LIMIT 1" : "")
    }

    /// Reads the rows within `range` in `direction`, calling `accept`; returns
    /// the last rowid taken (the highest going up, the lowest going down).
    func pass(
        _ direction: Direction, within range: ClosedRange<Int64>, _ scan: inout SalvageSource.Scan,
        _ accept: (Statement) throws -> Bool
    ) throws -> Int64? {
        let up = direction == .up
        // The next rowid to read from; rows before it (in `direction`) are done.
        var next = up ? range.lowerBound : range.upperBound
        // Where the last pass over a failure went on from: the next one goes
        // on from further, so a run of refused rows before a failure ends.
        var resumedAt: Int64?
        var taken: Int64?
        while true {
            do {
                try source.connection.withStatement(sql(direction, limit: false)) { statement in
                    try statement.bind(up ? next : range.lowerBound, at: 1)
                    try statement.bind(up ? range.upperBound : next, at: 2)
                    while try statement.step() {
                        let rowid = statement.int64(at: 0)
                        guard up ? rowid >= next : rowid <= next else { continue }  // out of order: garbage
                        let took: Bool
                        do { took = try accept(statement) } catch { throw NotARead(error: error) }
                        guard took else { continue }
                        scan.accepted += 1
                        taken = rowid
                        if rowid == (up ? range.upperBound : range.lowerBound) { return }
                        next = up ? rowid + 1 : rowid - 1
                    }
                }
                return taken
            } catch let failure as NotARead {
                throw failure.error
            } catch let error as SQLiteError where error.isDamageOrRead {
                scan.failures += 1
                if up && scan.accepted == 0 { scan.failedBeforeFirstRow = true }
                var bad = next
                if let resumedAt { bad = up ? max(bad, resumedAt) : min(bad, resumedAt) }
                guard let readable = firstReadable(direction, after: bad, within: range) else { return taken }
                next = readable
                resumedAt = readable
            }
        }
    }

    /// The nearest rowid past `bad` (where reading failed) in `direction`,
    /// within `range`, from which the table reads again; nil when nothing
    /// past it does.
    private func firstReadable(_ direction: Direction, after bad: Int64, within range: ClosedRange<Int64>) -> Int64? {
        let up = direction == .up
        let probeSQL = sql(direction, limit: true)
        func probe(_ rowid: Int64) -> Probe {
            do {
                return try source.connection.withStatement(probeSQL) { statement in
                    try statement.bind(up ? rowid : range.lowerBound, at: 1)
                    try statement.bind(up ? range.upperBound : rowid, at: 2)
                    return try statement.step() ? .row : .end
                }
            } catch {
                return .failed
            }
        }
        /// `rowid` moved `distance` in `direction`, nil when that leaves `range`.
        func moved(_ rowid: Int64, _ distance: Int64) -> Int64? {
            let (result, overflow) =
                up ? rowid.addingReportingOverflow(distance) : rowid.subtractingReportingOverflow(distance)
            return overflow || !range.contains(result) ? nil : result
        }
        // Doubling steps until a probe reads (or there is nothing left).
        var failing = bad
        var step: Int64 = 1
        var reading: Int64?
        while reading == nil {
            guard let candidate = moved(failing, step) else { return nil }
            switch probe(candidate) {
            case .failed:
                failing = candidate
                step = step.multipliedReportingOverflow(by: 2).overflow ? .max : step * 2
            case .row, .end: reading = candidate
            }
        }
        // Halving back to the nearest rowid that reads.
        var good = reading!
        while (up ? good - failing : failing - good) > 1 {
            let middle = up ? failing + (good - failing) / 2 : good + (failing - good) / 2
            if case .failed = probe(middle) { failing = middle } else { good = middle }
        }
        return probe(good) == .end ? nil : good
    }
}
