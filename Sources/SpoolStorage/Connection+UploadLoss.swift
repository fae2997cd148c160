/// Why events the uploader had not sent yet were lost: the names of the
/// counts a request reports (`upload_loss.cause`, the `spool.lost` members
/// of Spool's body, the keys of the `X-Spool-Loss` header).
package enum LossCause: String, CaseIterable, Sendable {
    /// The queue's count bound (`maximumRetainedEvents`).
    case queueCount = "queue_count"
    /// The queue's byte bound (`maximumQueueBytes`).
    case queueBytes = "queue_bytes"
    /// The queue's age bound (`maximumEventAge`).
    case queueAge = "queue_age"
    /// The bounds the free-space guard froze while the disk was nearly full.
    case freeSpace = "free_space"
    /// Refused by the collector on their own, or over a format's per-event
    /// limit: set aside in `dead_letters`.
    case deadLettered = "dead_lettered"
    /// Rows a salvage of a damaged file could not read.
    case salvaged
    /// Committed, then gone with a lost WAL.
    case walLost = "wal_lost"
}

/// Events lost, by cause: what one request reports, or what waits to be
/// reported.
package struct LossCounts: Sendable, Hashable {
    /// Indexed by the position of the cause in ``LossCause/allCases``.
    private var counts = [Int](repeating: 0, count: LossCause.allCases.count)

    package init() {}

    package subscript(cause: LossCause) -> Int {
        get { counts[Self.index(cause)] }
        set { counts[Self.index(cause)] = newValue }
    }

    /// True when nothing was lost.
    package var isEmpty: Bool { counts.allSatisfy { $0 == 0 } }

    /// Every cause with its count, in ``LossCause/allCases`` order.
    package var all: [(cause: LossCause, events: Int)] {
        LossCause.allCases.map { ($0, self[$0]) }
    }

    private static func index(_ cause: LossCause) -> Int {
        LossCause.allCases.firstIndex(of: cause) ?? 0
    }
}

extension Connection {
    /// Counts `events` lost to `cause` for the collector (`upload_loss`),
    /// inside the caller's transaction. Before the uploader first ran on the
    /// file (no `uploader` row in `consumers`), every event lost is one it
    /// would have sent, and counts too.
    package func countLoss(_ cause: LossCause, _ events: Int) throws {
        guard events > 0 else { return }
        try withStatement(
            """
            INSERT INTO upload_loss (cause, events) VALUES (?, ?) \
            ON CONFLICT (cause) DO UPDATE SET events = events + excluded.events
            """
        ) { statement in
            try statement.bind(cause.rawValue, at: 1)
            try statement.bind(events, at: 2)
            try statement.step()
        }
    }

    /// What the request whose first event is at `first` carries, inside the
    /// uploader's read transaction: what an unsettled request starting there
    /// carries already (a retry, in this process or another), or else what
    /// is counted less what the unsettled requests carry, recorded as this
    /// request's. So two requests in flight never carry the same count.
    package func lossToCarry(from first: Int64) throws -> LossCounts {
        let carried = try carriedLoss(from: first)
        guard carried.isEmpty else { return carried }
        var available = LossCounts()
        try withStatement(
            """
            SELECT l.cause, l.events - coalesce((SELECT sum(c.events) FROM upload_loss_carried AS c \
            WHERE c.cause = l.cause), 0) FROM upload_loss AS l
            """
        ) { statement in
            while try statement.step() {
                guard let cause = LossCause(rawValue: statement.string(at: 0)) else { continue }
                available[cause] = max(0, statement.int(at: 1))
            }
        }
        guard !available.isEmpty else { return available }
        try withStatement(
            "INSERT INTO upload_loss_carried (first_seq, cause, events) VALUES (?, ?, ?)"
        ) { statement in
            try statement.bind(first, at: 1)
            for (cause, events) in available.all where events > 0 {
                try statement.bind(cause.rawValue, at: 2)
                try statement.bind(events, at: 3)
                try statement.step()
                statement.resetKeepingBindings()
            }
        }
        return available
    }

    /// What the unsettled request whose first event is at `first` carries
    /// (nothing when none was recorded).
    package func carriedLoss(from first: Int64) throws -> LossCounts {
        try withStatement("SELECT cause, events FROM upload_loss_carried WHERE first_seq = ?") { statement in
            try statement.bind(first, at: 1)
            var carried = LossCounts()
            while try statement.step() {
                guard let cause = LossCause(rawValue: statement.string(at: 0)) else { continue }
                carried[cause] = statement.int(at: 1)
            }
            return carried
        }
    }

    /// Inside the transaction that settles a request: with `accepted`, the
    /// position of the first event of a request the collector accepted,
    /// takes what it carried off the counts (never below zero). Then forgets
    /// what that request and the requests starting at or before `through`
    /// (the uploader's position: their events are settled, so none of them
    /// is sent again) carried: what they carried and the collector did not
    /// accept is reported by the next request.
    package func settleLoss(accepted first: Int64?, through: Int64) throws {
        if let first {
            try withStatement(
                """
                UPDATE upload_loss SET events = max(0, upload_loss.events - c.events) FROM upload_loss_carried AS c \
                WHERE c.first_seq = ? AND c.cause = upload_loss.cause
                """
            ) { statement in
                try statement.bind(first, at: 1)
                try statement.step()
            }
            try execute("DELETE FROM upload_loss WHERE events = 0")
        }
        try withStatement("DELETE FROM upload_loss_carried WHERE first_seq <= ?") { statement in
            try statement.bind(max(through, first ?? through), at: 1)
            try statement.step()
        }
    }

    /// Forgets every count, reported or not: the events they describe were
    /// erased, or discarded when consent was withdrawn.
    package func forgetLoss() throws {
        try execute("DELETE FROM upload_loss; DELETE FROM upload_loss_carried")
    }

    /// Every count not yet reported in an accepted request.
    package func countedLoss() throws -> LossCounts {
        var counts = LossCounts()
        try withStatement("SELECT cause, events FROM upload_loss") { statement in
            while try statement.step() {
                guard let cause = LossCause(rawValue: statement.string(at: 0)) else { continue }
                counts[cause] = statement.int(at: 1)
            }
        }
        return counts
    }
}

extension LossCounts {
    /// The counts as the `X-Spool-Loss` header carries them: an RFC 8941
    /// dictionary of integers, every cause, in a fixed order
    /// (`queue_count=3, queue_bytes=0, …`).
    package var headerValue: String {
        all.map { "\($0.cause.rawValue)=\($0.events)" }.joined(separator: ", ")
    }
}
