import Foundation

extension Connection {
    /// Moves `events` to the dead letters with `status` and `reason`, and
    /// advances `consumer` past them, in one transaction (their parameters
    /// sealed again when the connection seals; the uploader's counted for
    /// the collector, ``LossCause/deadLettered``). The events stay in
    /// the log for other consumers until everyone has passed them. `now`
    /// (seconds since 1970) is their `failed_at`.
    package func deadLetter(
        _ events: some Collection<StoredEvent>, status: Int?, reason: String, consumer: String, now: Double
    ) throws {
        guard let last = events.map(\.seq).max() else { return }
        try sealingTransaction {
            try withStatement(
                """
                INSERT OR REPLACE INTO dead_letters \
                (seq, id, name, parameters, recorded_at, session_id, status, reason, failed_at, type, target, \
                identity_id, context_id, sealed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """
            ) { statement in
                for event in events {
                    try statement.bind(event.seq, at: 1)
                    try statement.bind(event.id, at: 2)
                    try statement.bind(event.name, at: 3)
                    let sealed = try sealEvent(event.parametersJSON, target: event.target, eventID: event.id)
                    try statement.bind(sealed == nil ? event.parametersJSON : Self.sealedJSON, at: 4)
                    try statement.bindBlob(sealed, at: 14)
                    try statement.bind(event.recordedAt, at: 5)
                    try statement.bind(event.sessionID, at: 6)
                    if let status { try statement.bind(status, at: 7) } else { try statement.bindNull(at: 7) }
                    try statement.bind(String(reason.prefix(500)), at: 8)
                    try statement.bind(now, at: 9)
                    try statement.bind(event.type, at: 10)
                    try statement.bind(sealed == nil ? event.target : nil, at: 11)
                    try statement.bind(event.identityID, at: 12)
                    try statement.bind(event.contextID, at: 13)
                    try statement.step()
                    statement.resetKeepingBindings()
                }
            }
            if consumer == Self.uploaderConsumer { try countLoss(.deadLettered, events.count) }
            try advanceConsumerInTransaction(consumer, to: last)
        }
    }

    /// How many events sit in the dead letters.
    package func deadLetterCount() throws -> Int {
        try scalarInt("SELECT count(*) FROM dead_letters")
    }
}
