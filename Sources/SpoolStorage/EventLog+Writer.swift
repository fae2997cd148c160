import Foundation

// MARK: - The writer (on the database queue)

extension EventLog {
    func scheduleCommit(after delay: TimeInterval) {
        let body: @Sendable (Connection?) -> Void = { [self] connection in
            guard let connection else { return failAll(StorageError.closed) }
            commitBuffered(connection)
        }
        if delay > 0 { database.asyncAfter(delay, body) } else { database.async(body) }
    }

    /// Commits what is buffered, on the database queue, in transactions of at
    /// most ``maximumGroupSize`` rows.
    ///
    /// A row the database refuses (a constraint, a value too big) must not
    /// hold back the rows around it: the group is then committed row by row,
    /// and only the refused row's callers get the error. Any other failure
    /// (disk full, I/O) keeps everything buffered, in order, for a retry.
    func commitBuffered(_ connection: Connection) {
        database.assertOnQueue()
        let started = EventLog.threadCPUNanoseconds()
        // Take the whole buffer in O(1); appenders start a fresh one.
        let (staged, waiting) = state.withLock { $0.buffer.takeForCommit() }
        defer {
            let spent = EventLog.threadCPUNanoseconds() &- started
            state.withLock { state in
                state.writerCPU.nanoseconds &+= spent
                state.writerCPU.events += staged.count
            }
        }
        if waiting { state.broadcast() }  // there is room again
        var start = staged.startIndex
        while start < staged.endIndex {
            let group = staged[start..<min(staged.endIndex, start + Self.maximumGroupSize)]
            do {
                do {
                    try commit(group, connection)
                } catch let error as SQLiteError where error.isRowSpecific {
                    for index in group.indices {
                        start = index
                        do {
                            try commit(staged[index...index], connection)
                        } catch let error as SQLiteError where error.isRowSpecific {
                            reject(staged[index], error)
                        }
                    }
                }
                start = group.endIndex
            } catch {
                keepForRetry(staged[start...], after: error)
                return
            }
        }
        rescheduleIfNeeded(afterFailure: false)
    }

    /// Puts what failed back at the front of the buffer, in order, tells its
    /// waiters it is not committed yet, and schedules the next attempt.
    private func keepForRetry(_ remaining: ArraySlice<Pending>, after error: any Error) {
        let reported: any Error = (error as? SQLiteError).map { StorageError.notYetCommitted($0) } ?? error
        let (failed, handler) = state.withLock { ($0.buffer.failed(keeping: remaining), $0.failureHandler) }
        state.broadcast()  // appenders waiting for room are refused while commits fail
        handler?(.commitFailed(error, buffered: failed.buffered))
        database.noticeDamage(error)
        for waiter in failed.waiters { waiter.resume(throwing: reported) }
        rescheduleIfNeeded(afterFailure: true)
    }

    /// Writes one group in one transaction and tells the handler and the
    /// waiters.
    private func commit(_ group: ArraySlice<Pending>, _ connection: Connection) throws {
        let (head, built, reading, drops, stamps) = try write(group, connection)
        let last = group[group.endIndex - 1].ticket
        let (settled, handler, failureHandler) = state.withLock {
            ($0.buffer.committed(through: last, head: head), $0.commitHandler, $0.failureHandler)
        }
        if settled.recoveredAfter > 0 { failureHandler?(.commitRecovered(failures: settled.recoveredAfter)) }
        if drops.total > 0 { failureHandler?(.eventsDropped(drops)) }
        // The handler first: once a caller sees its event durable, the event
        // is already on its way to listeners.
        handler?(group.count, head, { built ?? Self.committedEvents(group, head: head, stamps: stamps) }, reading)
        for waiter in settled.waiters { waiter.resume() }
        for (waiter, position) in settled.positions { waiter(.success(position)) }
    }

    /// Drops one row the database refused: its callers get `error`, and the
    /// log moves on.
    private func reject(_ pending: Pending, _ error: SQLiteError) {
        let (settled, handler) = state.withLock {
            ($0.buffer.refused(pending.ticket, because: error), $0.failureHandler)
        }
        handler?(.rowRejected(error))
        for waiter in settled.waiters { waiter.resume(throwing: error) }
        for (waiter, position) in settled.positions { waiter(.success(position)) }
    }

    private func rescheduleIfNeeded(afterFailure: Bool) {
        if let delay = state.withLock({ $0.buffer.passEnded(afterFailure: afterFailure) }) {
            scheduleCommit(after: delay)
        } else if database.takeWALGrown() {
            // Idle after the WAL passed the checkpoint threshold: give its
            // file back a little later (commits overwrite it in place while
            // busy, and a WAL that starts over keeps its file; see
            // `Connection.walSizeLimitBytes`).
            scheduleShrink()
        }
    }

    /// The rows a committed group became (their positions end at `head`).
    private static func committedEvents(_ group: ArraySlice<Pending>, head: Int64, stamps: CommitStamps)
        -> [StoredEvent]
    {
        var seq = head - Int64(group.count)
        return group.indices.map { index in
            seq += 1
            let record = group[index].record
            var event = StoredEvent(
                seq: seq, id: group[index].id, name: record.name, parametersJSON: record.parametersJSON,
                recordedAt: record.recordedAt, sessionID: record.sessionID, priority: record.priority)
            event.type = record.type
            event.target = record.target
            (event.identity, event.contextID) = stamps.rows(at: index - group.startIndex)
            event.identityID = event.identity?.id
            if record.addsToHistory { event.historyValues = record.historyValues }
            return event
        }
    }

    /// Inserts one group in one transaction (its events, their history rows,
    /// the new head, the retention bound, and now and then history pruning),
    /// lets the group reader read before it commits, and returns the new
    /// head, the committed rows if the reader built them, and its reading.
    private func write(
        _ group: ArraySlice<Pending>, _ connection: Connection
    ) throws -> (head: Int64, events: [StoredEvent]?, reading: (any Sendable)?, drops: QueueDrops, stamps: CommitStamps)
    {
        let (bounds, historyLimits, pruneHistory, reader, launch) = state.withLock { state in
            (
                state.queueBounds, state.historyLimits,
                state.historyLimits != nil && state.historySincePrune >= 1_024, state.groupReader, state.launch
            )
        }
        var head: Int64 = 0
        var drops = QueueDrops()
        var built: [StoredEvent]?
        var reading: (any Sendable)?
        var historyRows = 0
        var stamps = CommitStamps()
        // The schema's CHECKs (json_valid, priority in 0/1) guard every other
        // writer of the file. Spool's own rows are valid by construction (the
        // encoder's fuzz test asserts json_valid on what it writes), and
        // json_valid alone costs about a quarter of the insert, so the writer
        // skips evaluating them for its own transaction, in every build.
        try connection.execute("PRAGMA ignore_check_constraints = ON")
        // try?: if turning them back on fails, only Spool's own statements on
        // this connection run unchecked until the next commit's `OFF`; no
        // data is lost.
        defer { try? connection.execute("PRAGMA ignore_check_constraints = OFF") }
        // Rows written for identity and context stamps: forgotten again if
        // the transaction rolls back.
        var written = IdentityBook.Written()
        var committed = false
        defer { if !committed { identities?.rolledBack(written) } }
        try connection.sealingTransaction {
            // Read inside the transaction, so another process sharing the file
            // (an app extension) cannot be handed the same positions.
            var seq = try connection.headPosition()
            var bytesTotal = try connection.bytesTotal()
            if let identities {
                stamps = try identities.rows(
                    // By index: iterating the slice would copy every record.
                    for: group.indices.lazy.map { (group[$0].record.stamps, group[$0].record.recordedAt) },
                    on: connection, written: &written)
            }
            let insert = try connection.cachedStatement(
                """
                INSERT INTO events (seq, id, name, parameters, recorded_at, session_id, priority, bytes_before, \
                type, target, identity_id, context_id, sealed, launch, launch_ms) \
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
            defer { insert.reset() }
            // The clock each event's age is measured on: read once a commit.
            let stamp = launch?.commitStamp(database.clock)
            try CommitStamp.bindLaunch(stamp, to: insert, at: 14)
            // The message type and target, bound only when they change: the
            // statement keeps its bindings between rows, and a bound text is
            // SQLite's own copy (an allocation each time).
            var boundMessage: (type: String, target: String?)?
            // With a sealer, the rows at `sealedRun`'s offsets are sealed
            // ahead (`Pending.seal`), at `sealed`.
            var sealedRun = 0..<0
            var sealed: [Range<Int>] = []
            // Through a buffer pointer: reading an element of the slice
            // would copy its record (a retain and release per string).
            try group.withUnsafeBufferPointer { group in
                for offset in group.indices {
                    if let sealing = connection.sealing, !sealedRun.contains(offset) {
                        sealedRun = offset..<min(offset + Pending.sealedRun, group.count)
                        try Pending.seal(
                            group.baseAddress! + offset, count: sealedRun.count, in: sealing, ranges: &sealed)
                    }
                    seq += 1
                    // A sealed row's target is in its sealed value.
                    let message = (
                        type: group[offset].record.type,
                        target: connection.sealing == nil ? group[offset].record.target : nil
                    )
                    if boundMessage.map({ $0.type != message.type || $0.target != message.target }) ?? true {
                        try insert.bind(message.type, at: 9)
                        try insert.bind(message.target, at: 10)
                        boundMessage = message
                    }
                    try insert.bind(bytesTotal, at: 8)
                    bytesTotal += Int64(group[offset].record.boundBytes)
                    if stamps.count > 0 {
                        let (identityID, contextID) = stamps.ids(at: offset)
                        try insert.bind(identityID, at: 11)
                        try insert.bind(contextID, at: 12)
                    }
                    try stamp?.bindMilliseconds(recordedAt: group[offset].record.recordedAt, to: insert, at: 15)
                    try Pending.insert(
                        group.baseAddress! + offset, as: seq, with: insert,
                        sealed: connection.sealing?.sealedInRun(sealed[offset - sealedRun.lowerBound]))
                    if group[offset].record.addsToHistory { historyRows += 1 }
                }
            }
            try connection.withStatement("UPDATE log_head SET last_seq = ?, bytes_total = ? WHERE id = 1") { head in
                try head.bind(seq, at: 1)
                try head.bind(bytesTotal, at: 2)
                try head.step()
            }
            drops = try connection.enforceBounds(
                bounds, head: seq, bytesTotal: bytesTotal, now: database.clock.now)
            if historyRows > 0 {
                // One upsert per run of events with the same name in the
                // same millisecond: a burst adds to a few rows instead of
                // writing (and later pruning) one per event.
                try connection.withStatement(HistoryMillisecond.addSQL) { history in
                    var run: (name: String, millisecond: Double, occurrences: Int)?
                    func add(_ run: (name: String, millisecond: Double, occurrences: Int)) throws {
                        try history.bind(run.name, at: 1)
                        try history.bind(run.millisecond, at: 2)
                        try history.bind(run.occurrences, at: 3)
                        try history.step()
                        history.resetKeepingBindings()
                    }
                    for index in group.indices where group[index].record.addsToHistory {
                        let millisecond = HistoryMillisecond.of(group[index].record.recordedAt)
                        // Names by their bytes, as the history's key compares them.
                        if let current = run, current.millisecond == millisecond,
                            Bytewise.same(current.name, group[index].record.name)
                        {
                            run?.occurrences += 1
                        } else {
                            if let run { try add(run) }
                            run = (group[index].record.name, millisecond, 1)
                        }
                    }
                    if let run { try add(run) }
                }
                try addHistoryValues(of: group, connection)
            }
            if pruneHistory, let limits = historyLimits {
                try connection.pruneHistory(
                    before: limits.maximumAge.map { database.clock.now - $0 },
                    keepingAtMost: limits.maximumRows, values: limits.maximumValueRows)
            }
            head = seq
            if let reader {
                reading = reader(
                    {
                        if built == nil { built = Self.committedEvents(group, head: seq, stamps: stamps) }
                        return built!
                    }, connection)
            }
        }
        committed = true
        state.withLock { state in
            state.historySincePrune = pruneHistory ? historyRows : state.historySincePrune + historyRows
        }
        return (head, built, reading, drops, stamps)
    }

    /// Adds the property values a survey declared, of the group's events
    /// that enter the history, to `event_history_values`: one upsert per
    /// name, property, value and millisecond in the group, in the order
    /// each was first met (ids keep growing with time).
    private func addHistoryValues(of group: ArraySlice<Pending>, _ connection: Connection) throws {
        // Names, properties and text by their bytes, as SQLite's unique
        // key on the table compares them.
        struct Key: Hashable {
            let name: Bytewise
            let property: Bytewise
            let value: HistoryValue
            let millisecond: Double

            init(name: String, entry: HistoryValues.Entry, millisecond: Double) {
                (self.name, property, value) = (Bytewise(name), Bytewise(entry.property), entry.value)
                self.millisecond = millisecond
            }

            static func == (left: Key, right: Key) -> Bool {
                guard left.millisecond == right.millisecond, left.name == right.name, left.property == right.property
                else { return false }
                switch (left.value, right.value) {
                case (.text(let left), .text(let right)): return Bytewise(left) == Bytewise(right)
                default: return left.value == right.value
                }
            }

            func hash(into hasher: inout Hasher) {
                hasher.combine(name)
                hasher.combine(property)
                hasher.combine(millisecond)
                switch value {
                case .text(let text): hasher.combine(Bytewise(text))
                default: hasher.combine(value)
                }
            }
        }
        var keys: [Key] = []
        var occurrences: [Key: Int] = [:]
        for index in group.indices where group[index].record.addsToHistory {
            guard let values = group[index].record.historyValues else { continue }
            let millisecond = HistoryMillisecond.of(group[index].record.recordedAt)
            for entry in values.entries {
                let key = Key(name: group[index].record.name, entry: entry, millisecond: millisecond)
                if let count = occurrences[key] {
                    occurrences[key] = count + 1
                } else {
                    occurrences[key] = 1
                    keys.append(key)
                }
            }
        }
        guard !keys.isEmpty else { return }
        try connection.withStatement(Connection.addHistoryValueSQL) { insert in
            for key in keys {
                try insert.bind(key.name.string, at: 1)
                try insert.bind(key.property.string, at: 2)
                try key.value.bind(to: insert, at: 3)
                try insert.bind(key.millisecond, at: 4)
                try insert.bind(occurrences[key] ?? 1, at: 5)
                try insert.step()
                insert.resetKeepingBindings()
            }
        }
    }

    func failAll(_ error: any Error) {
        let (waiters, positions) = state.withLock { $0.buffer.failAll() }
        state.broadcast()
        for waiter in waiters { waiter.resume(throwing: error) }
        for waiter in positions { waiter(.failure(error)) }
    }
}

extension EventLog {
    /// CPU time of the calling thread, in nanoseconds (the writer's share
    /// of a burst; spool-bench compares the caller's with it).
    package static func threadCPUNanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)  // clock-exempt: CPU spent, not time passing
        return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
    }
}
