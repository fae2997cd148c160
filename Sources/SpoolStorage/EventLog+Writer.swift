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
        // Take the whole buffer in O(1); appenders start a fresh one.
        let staged: [Pending] = state.withLock { state in
            var staged: [Pending] = []
            swap(&staged, &state.buffer)
            state.bufferedBytes = 0
            return staged
        }
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
        let last = remaining[remaining.endIndex - 1].ticket
        let reported: any Error = (error as? SQLiteError).map { StorageError.notYetCommitted($0) } ?? error
        let (failed, handler, buffered) = state.withLock { state in
            state.buffer.insert(contentsOf: remaining, at: 0)
            state.bufferedBytes += remaining.reduce(0) {
                $0 + $1.record.parametersJSON.utf8.count + $1.record.name.utf8.count
            }
            state.consecutiveFailures += 1
            state.lastFailure = error
            return (takeWaiters(through: last, from: &state), state.failureHandler, state.buffer.count)
        }
        handler?(.commitFailed(error, buffered: buffered))
        for waiter in failed { waiter.continuation.resume(throwing: reported) }
        rescheduleIfNeeded(afterFailure: true)
    }

    /// Writes one group in one transaction and tells the handler and the
    /// waiters.
    private func commit(_ group: ArraySlice<Pending>, _ connection: Connection) throws {
        let (committed, head) = try write(group, connection)
        let last = group[group.endIndex - 1].ticket
        let (ready, handler, recovered, failureHandler) = state.withLock { state in
            state.durableThrough = last
            let recovered = state.consecutiveFailures
            state.consecutiveFailures = 0
            state.lastFailure = nil
            return (
                takeWaiters(through: last, from: &state), state.commitHandler, recovered, state.failureHandler
            )
        }
        if recovered > 0 { failureHandler?(.commitRecovered(failures: recovered)) }
        // The handler first: once a caller sees its event durable, the event
        // is already on its way to listeners.
        if let handler { handler(committed(), head) }
        for waiter in ready { waiter.continuation.resume() }
    }

    /// Drops one row the database refused: its callers get `error`, and the
    /// log moves on.
    private func reject(_ pending: Pending, _ error: SQLiteError) {
        let (failed, handler) = state.withLock { state in
            state.rejected[pending.ticket] = error
            state.durableThrough = max(state.durableThrough, pending.ticket)
            return (takeWaiters(through: pending.ticket, from: &state), state.failureHandler)
        }
        handler?(.rowRejected(error))
        for waiter in failed { waiter.continuation.resume(throwing: error) }
    }

    private func takeWaiters(through ticket: UInt64, from state: inout State) -> [Waiter] {
        guard state.waiters.contains(where: { $0.ticket <= ticket }) else { return [] }
        let ready = state.waiters.filter { $0.ticket <= ticket }
        state.waiters.removeAll { $0.ticket <= ticket }
        return ready
    }

    private func rescheduleIfNeeded(afterFailure: Bool) {
        let delay: TimeInterval? = state.withLock { state in
            if state.buffer.isEmpty {
                state.commitScheduled = false
                return nil
            }
            guard afterFailure else { return 0 }
            // 50 ms, doubling, at most 5 s between attempts.
            return min(5, 0.05 * pow(2, Double(min(state.consecutiveFailures - 1, 10))))
        }
        if let delay { scheduleCommit(after: delay) }
    }

    /// Inserts one group in one transaction and returns a builder for the
    /// committed rows (only called when someone listens) and the new head.
    private func write(_ group: ArraySlice<Pending>, _ connection: Connection) throws -> (
        () -> [CommittedEvent], Int64
    ) {
        let maximumRetained = state.withLock { $0.maximumRetainedEvents }
        var firstSeq: Int64 = 0
        var head: Int64 = 0
        #if !DEBUG
            // The schema's CHECKs (json_valid, priority in 0/1) guard every other
            // writer of the file. Spool's own rows are valid by construction (the
            // encoder's fuzz test asserts json_valid on what it writes), and
            // json_valid alone costs about a quarter of the insert, so release
            // builds skip evaluating them for this one statement's transaction.
            // Debug builds (the test suite) keep them on as a tripwire.
            try connection.execute("PRAGMA ignore_check_constraints = ON")
            // try?: turning the CHECKs back on cannot lose data; if it failed,
            // the next commit's `ON` leaves the same state anyway.
            defer { try? connection.execute("PRAGMA ignore_check_constraints = OFF") }
        #endif
        try connection.transaction {
            // Read inside the transaction, so another process sharing the file
            // (an app extension) cannot be handed the same positions.
            var seq = try connection.headPosition()
            firstSeq = seq + 1
            let insert = try connection.cachedStatement(
                """
                INSERT INTO events (seq, id, name, parameters, recorded_at, session_id, priority) \
                VALUES (?, ?, ?, ?, ?, ?, ?)
                """)
            defer { insert.reset() }
            var historyCount = 0
            for pending in group {
                let record = pending.record
                seq += 1
                try insert.bind(seq, at: 1)
                try insert.bind(pending.id, at: 2)
                try insert.bind(record.name, at: 3)
                try insert.bind(record.parametersJSON, at: 4)
                try insert.bind(record.recordedAt, at: 5)
                try insert.bind(record.sessionID, at: 6)
                try insert.bind(record.priority, at: 7)
                try insert.step()
                insert.resetKeepingBindings()
                if record.addsToHistory { historyCount += 1 }
            }
            try connection.withStatement("UPDATE log_head SET last_seq = ? WHERE id = 1") { head in
                try head.bind(seq, at: 1)
                try head.step()
            }
            if let maximumRetained { try connection.enforceRetention(maximum: maximumRetained, head: seq) }
            if historyCount > 0 {
                try connection.withStatement("INSERT INTO event_history (name, recorded_at) VALUES (?, ?)") { history in
                    for pending in group where pending.record.addsToHistory {
                        try history.bind(pending.record.name, at: 1)
                        try history.bind(pending.record.recordedAt, at: 2)
                        try history.step()
                        history.resetKeepingBindings()
                    }
                }
            }
            head = seq
        }
        let builder = {
            var seq = firstSeq
            return group.map { pending in
                defer { seq += 1 }
                let record = pending.record
                return CommittedEvent(
                    stored: StoredEvent(
                        seq: seq, id: pending.id, name: record.name, parametersJSON: record.parametersJSON,
                        recordedAt: record.recordedAt, sessionID: record.sessionID, priority: record.priority),
                    attachment: record.attachment)
            }
        }
        return (builder, head)
    }

    func failAll(_ error: any Error) {
        let waiters = state.withLock { state in
            defer { state.waiters.removeAll() }
            state.commitScheduled = false
            return state.waiters
        }
        for waiter in waiters { waiter.continuation.resume(throwing: error) }
    }
}
