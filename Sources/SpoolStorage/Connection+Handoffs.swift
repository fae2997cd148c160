import Foundation

/// A batch handed to the system's background transfer service and not yet
/// settled (a `background_transfers` row).
package struct Handoff: Sendable, Hashable {
    /// The Idempotency-Key of every send of these events.
    package let batchID: String
    /// The background session it was handed to.
    package let session: String
    /// In log order; never empty.
    package let positions: [Int64]
    /// The body's file name in the transfers directory.
    package let bodyFile: String
    package let compressed: Bool
    /// When it was last handed to the system, in seconds since 1970.
    package let handedAt: Double
    package let sends: Int
    /// False once a send ended without delivery: the next upload sends it again.
    package let withSystem: Bool

    package var first: Int64 { positions[0] }
    package var last: Int64 { positions[positions.count - 1] }
    package var count: Int { positions.count }

    package init(
        batchID: String, session: String, positions: [Int64], bodyFile: String, compressed: Bool,
        handedAt: Double, sends: Int = 1, withSystem: Bool = true
    ) {
        precondition(!positions.isEmpty, "a hand-off carries at least one event")
        self.batchID = batchID
        self.session = session
        self.positions = positions
        self.bodyFile = bodyFile
        self.compressed = compressed
        self.handedAt = handedAt
        self.sends = sends
        self.withSystem = withSystem
    }
}

extension Connection {
    /// Records `handoff`, or, for a batch already recorded, that it was
    /// handed off again (one more send, with the system since `handedAt`).
    package func recordHandoff(_ handoff: Handoff) throws {
        let positions = "[" + handoff.positions.map(String.init).joined(separator: ",") + "]"
        try withStatement(
            """
            INSERT INTO background_transfers \
            (batch_id, session, first_seq, last_seq, positions, event_count, body_file, compressed, handed_at) \
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) \
            ON CONFLICT (batch_id) DO UPDATE SET \
            session = excluded.session, handed_at = excluded.handed_at, sends = sends + 1, \
            state = 'handed_off', last_report = NULL
            """
        ) { statement in
            try statement.bind(handoff.batchID, at: 1)
            try statement.bind(handoff.session, at: 2)
            try statement.bind(handoff.first, at: 3)
            try statement.bind(handoff.last, at: 4)
            try statement.bind(positions, at: 5)
            try statement.bind(handoff.count, at: 6)
            try statement.bind(handoff.bodyFile, at: 7)
            try statement.bind(handoff.compressed, at: 8)
            try statement.bind(handoff.handedAt, at: 9)
            try statement.step()
        }
    }

    /// The oldest hand-off not yet settled, if any.
    package func oldestHandoff() throws -> Handoff? {
        try handoffs(where: "1 ORDER BY first_seq LIMIT 1", bind: nil).first
    }

    /// The hand-off `batchID`, if it is not settled yet.
    package func handoff(_ batchID: String) throws -> Handoff? {
        try handoffs(where: "batch_id = ?", bind: batchID).first
    }

    /// Every hand-off not yet settled, oldest first.
    package func allHandoffs() throws -> [Handoff] {
        try handoffs(where: "1 ORDER BY first_seq", bind: nil)
    }

    private func handoffs(where clause: String, bind value: String?) throws -> [Handoff] {
        try withStatement(
            """
            SELECT batch_id, session, positions, body_file, compressed, handed_at, sends, state \
            FROM background_transfers WHERE \(clause)
            """
        ) { statement in
            if let value { try statement.bind(value, at: 1) }
            var found: [Handoff] = []
            while try statement.step() {
                let positions = statement.string(at: 2).dropFirst().dropLast().split(separator: ",")
                    .compactMap { Int64($0.trimmingCharacters(in: .whitespaces)) }
                // The CHECK keeps it a JSON array; an empty one carries nothing.
                guard !positions.isEmpty else { continue }
                found.append(
                    Handoff(
                        batchID: statement.string(at: 0), session: statement.string(at: 1), positions: positions,
                        bodyFile: statement.string(at: 3), compressed: statement.int(at: 4) != 0,
                        handedAt: statement.double(at: 5), sends: statement.int(at: 6),
                        withSystem: statement.string(at: 7) == "handed_off"))
            }
            return found
        }
    }

    /// The app itself sends hand-off `batchID` once more.
    package func countHandoffSend(_ batchID: String) throws {
        try withStatement("UPDATE background_transfers SET sends = sends + 1 WHERE batch_id = ?") { statement in
            try statement.bind(batchID, at: 1)
            try statement.step()
        }
    }

    /// A send of `batchID` ended without delivery (`report` says how): the
    /// next upload sends it again, with the same batch id.
    package func markHandoffFailed(_ batchID: String, report: String) throws {
        try withStatement(
            "UPDATE background_transfers SET state = 'failed', last_report = ? WHERE batch_id = ?"
        ) { statement in
            try statement.bind(report, at: 1)
            try statement.bind(batchID, at: 2)
            try statement.step()
        }
    }

    /// Deletes hand-off `batchID`.
    ///
    /// - Returns: false when no such hand-off was recorded (it was settled
    ///   already, or erased).
    @discardableResult
    package func deleteHandoff(_ batchID: String) throws -> Bool {
        try withStatement("DELETE FROM background_transfers WHERE batch_id = ?") { statement in
            try statement.bind(batchID, at: 1)
            try statement.step()
        }
        return changes == 1
    }

    /// Deletes the hand-offs whose events are all at or before `position`
    /// (consent withdrawn: they are never uploaded).
    ///
    /// - Returns: their batch ids.
    package func deleteHandoffs(through position: Int64) throws -> [String] {
        let files = try allHandoffs().filter { $0.last <= position }.map(\.batchID)
        try withStatement("DELETE FROM background_transfers WHERE last_seq <= ?") { statement in
            try statement.bind(position, at: 1)
            try statement.step()
        }
        return files
    }
}
