import Foundation

/// Who holds a consumer's lease, and until when.
package struct ConsumerLease: Sendable, Hashable {
    package let owner: String
    /// Seconds since 1970.
    package let expires: Double
}

extension Connection {
    /// Takes or renews `consumer`'s lease for `owner` until `now + duration`,
    /// unless another live owner holds one that has not expired. A lease whose
    /// owner process is gone (a crash, a SIGKILL) is taken at once rather
    /// than when it expires. Call inside a write transaction (the check and
    /// the take are then atomic across processes).
    ///
    /// - Returns: nil when taken; otherwise the lease that stands in the way.
    package func acquireLease(
        _ consumer: String, owner: String, now: Double, duration: Double
    ) throws -> ConsumerLease? {
        if try takeLease(consumer, owner: owner, now: now, duration: duration) { return nil }
        guard let lease = try lease(of: consumer) else {
            return ConsumerLease(owner: "", expires: now)  // no consumer row: nothing to lease
        }
        guard !LeaseOwner.isAlive(lease.owner) else { return lease }
        // Its process is gone: take it over.
        try withStatement(
            "UPDATE consumers SET lease_owner = ?, lease_expires = ? WHERE id = ? AND lease_owner = ?"
        ) { statement in
            try statement.bind(owner, at: 1)
            try statement.bind(now + duration, at: 2)
            try statement.bind(consumer, at: 3)
            try statement.bind(lease.owner, at: 4)
            try statement.step()
        }
        return changes == 1 ? nil : lease
    }

    private func takeLease(_ consumer: String, owner: String, now: Double, duration: Double) throws -> Bool {
        try withStatement(
            """
            UPDATE consumers SET lease_owner = ?, lease_expires = ? \
            WHERE id = ? AND (lease_owner IS NULL OR lease_owner = ? OR lease_expires <= ?)
            """
        ) { statement in
            try statement.bind(owner, at: 1)
            try statement.bind(now + duration, at: 2)
            try statement.bind(consumer, at: 3)
            try statement.bind(owner, at: 4)
            try statement.bind(now, at: 5)
            try statement.step()
        }
        return changes == 1
    }

    /// Gives the lease up if `owner` holds it.
    package func releaseLease(_ consumer: String, owner: String) throws {
        try withStatement(
            "UPDATE consumers SET lease_owner = NULL, lease_expires = 0 WHERE id = ? AND lease_owner = ?"
        ) { statement in
            try statement.bind(consumer, at: 1)
            try statement.bind(owner, at: 2)
            try statement.step()
        }
    }

    /// Where `consumer` stands, in one statement and without a
    /// transaction: its position, its lease (nil when nobody holds one) and
    /// whether uploads are paused; nil without a consumer row. What the
    /// uploader checks before it sends a batch it read while another request
    /// was in flight.
    package func standing(of consumer: String) throws -> (
        position: Int64, lease: ConsumerLease?, uploadsPaused: Bool
    )? {
        try withStatement(
            "SELECT position, lease_owner, lease_expires, EXISTS (SELECT 1 FROM upload_pause) FROM consumers WHERE id = ?"
        ) { statement in
            try statement.bind(consumer, at: 1)
            guard try statement.step() else { return nil }
            let lease =
                statement.isNull(at: 1)
                ? nil : ConsumerLease(owner: statement.string(at: 1), expires: statement.double(at: 2))
            return (statement.int64(at: 0), lease, statement.int(at: 3) != 0)
        }
    }

    /// The lease on `consumer`, if anyone holds one (expired or not).
    package func lease(of consumer: String) throws -> ConsumerLease? {
        try withStatement("SELECT lease_owner, lease_expires FROM consumers WHERE id = ?") { statement in
            try statement.bind(consumer, at: 1)
            guard try statement.step(), !statement.isNull(at: 0) else { return nil }
            return ConsumerLease(owner: statement.string(at: 0), expires: statement.double(at: 1))
        }
    }
}

/// A lease owner's name: unique per engine instance, readable at the CLI
/// (`pid 4242 #9f3a01c2`), and naming its process so a lease left by a
/// process that died can be recognised.
package enum LeaseOwner {
    package static func make() -> String {
        var random = SystemRandomNumberGenerator()
        let suffix = String(random.next() & 0xFFFF_FFFF, radix: 16)
        return "pid \(getpid()) #\(suffix)"
    }

    /// False only when `owner` names a process that certainly no longer
    /// exists on this machine. A process this one may not signal (another
    /// app's, in a sandbox) counts as alive; the lease then simply expires.
    package static func isAlive(_ owner: String) -> Bool {
        let parts = owner.split(separator: " ")
        guard parts.count == 3, parts[0] == "pid", let pid = Int32(parts[1]), pid > 0 else { return true }
        if pid == getpid() { return true }
        return kill(pid, 0) == 0 || errno != ESRCH
    }
}

extension Connection {
    /// Extends every lease `owner` holds on the consumers named `prefix…`
    /// to `now + duration`.
    ///
    /// - Returns: the consumers whose lease was extended: a lease missing
    ///   from it was taken over (or released) by someone else.
    package func renewLeases(owner: String, prefix: String, now: Double, duration: Double) throws -> Set<String> {
        try withStatement(
            """
            UPDATE consumers SET lease_expires = ? \
            WHERE lease_owner = ? AND substr(id, 1, length(?)) = ? RETURNING id
            """
        ) { statement in
            try statement.bind(now + duration, at: 1)
            try statement.bind(owner, at: 2)
            try statement.bind(prefix, at: 3)
            try statement.bind(prefix, at: 4)
            var renewed: Set<String> = []
            while try statement.step() { renewed.insert(statement.string(at: 0)) }
            return renewed
        }
    }

    /// Gives up every lease `owner` holds.
    package func releaseLeases(owner: String) throws {
        try withStatement("UPDATE consumers SET lease_owner = NULL, lease_expires = 0 WHERE lease_owner = ?") {
            statement in
            try statement.bind(owner, at: 1)
            try statement.step()
        }
    }

    /// The consumers whose lease `owner` holds, expired or not.
    package func consumers(leasedBy owner: String) throws -> [String] {
        try withStatement("SELECT id FROM consumers WHERE lease_owner = ? ORDER BY id") { statement in
            try statement.bind(owner, at: 1)
            var consumers: [String] = []
            while try statement.step() { consumers.append(statement.string(at: 0)) }
            return consumers
        }
    }
}
