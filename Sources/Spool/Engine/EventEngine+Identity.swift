import Foundation
import SpoolStorage

extension EventEngine {
    // MARK: - Identity

    /// Sets the signed-in user, and records an `identify` message carrying
    /// `traits`.
    ///
    /// Every event accepted from now on is recorded for this user (with the
    /// same ``SpoolIdentity/anonymousId``); events accepted before keep the
    /// identity they were recorded with, also if they are uploaded later.
    ///
    /// The change is kept in the database, in the order the calls were made:
    /// a restart restores the last change. Its row is written on the database
    /// queue right after the call, at the latest with the first commit of an
    /// event accepted after it (``identity()`` returns once it is written).
    /// From then on, other processes using the file record for this user
    /// every event they record from the call's time on, starting at their
    /// next commit.
    ///
    /// The traits pass the middleware first, as the `identify` message's
    /// parameters (type ``EventType/identify``), once: what the middleware
    /// leaves is what the identity keeps and the message carries. When a
    /// middleware drops the message (or throws), the user id still changes
    /// and no traits are kept. The identity changes whatever the gates say;
    /// the message itself goes through them like any event (consent,
    /// session limit). While consent is withheld or withdrawn, the change is
    /// kept in memory only: no user id or traits reach the file until
    /// consent is given (``setConsent(_:)``), when the identity in force is
    /// written.
    ///
    /// - Parameters:
    ///   - userId: the user's id in your system; nil signs the user out but
    ///     keeps the anonymous id (``reset()`` also starts a new one).
    ///   - traits: what you know about the user (name, plan…), replacing
    ///     earlier traits.
    /// - Throws: ``SpoolError/invalidEvent(_:)`` when `traits` holds a value
    ///   Spool cannot encode (then nothing changed); the errors of
    ///   ``record(_:parameters:)``.
    @discardableResult
    public func identify(userId: String?, traits: [String: EventValue] = [:]) throws -> RecordOutcome {
        // The traits pass the middleware once, for the identity and the
        // message alike: a scrubber covers what is kept of the user too.
        var message = Message(EventType.identify.rawValue, traits, type: .identify)
        let dropped = passMiddleware(&message)
        let traitsJSON = dropped == nil ? try EventEncoder.encode(message.parameters) : "{}"
        // The message carries the identity it made, whatever other thread
        // changes it meanwhile.
        identityCalls.lock()
        defer { identityCalls.unlock() }
        identities.change(userID: userId, traitsJSON: traitsJSON, at: configuration.clock.now)
        persistIdentity()
        if let dropped { return dropped.outcome }
        return try accept(message, settle: nil, passedMiddleware: true).outcome
    }

    /// Forgets the user: no user id, no traits, and a new anonymous id for
    /// every event accepted from now on (a sign-out on a shared device).
    /// Events accepted before keep the identity they were recorded with. The
    /// change is kept and ordered as ``identify(userId:traits:)``'s: its row
    /// reaches the file just after the call, so an app that may be killed
    /// right after a sign-out awaits ``identity()``, which returns once it
    /// is written.
    public func reset() {
        identityCalls.lock()
        defer { identityCalls.unlock() }
        identities.change(
            userID: nil, traitsJSON: "{}", newAnonymousID: UUID().uuidString.lowercased(),
            at: configuration.clock.now)
        persistIdentity()
    }

    /// Records an `alias` message saying that `userId` is the same person as
    /// the current user (or, with none, the anonymous id), then makes
    /// `userId` the current user, keeping the traits (before ``start()``,
    /// the ones the file holds). The current user is the one this engine
    /// knows when the call is made: before ``start()`` none, so the message
    /// names the anonymous id; call it after `start()`.
    ///
    /// - Throws: the errors of ``record(_:parameters:)``.
    @discardableResult
    public func alias(_ userId: String) throws -> RecordOutcome {
        identityCalls.lock()
        defer { identityCalls.unlock() }
        let current = identities.current.identity.user
        identities.change(userID: userId, traitsJSON: nil, at: configuration.clock.now)
        persistIdentity()
        return try accept(Message(EventType.alias.rawValue, [:], type: .alias, target: current.id), settle: nil)
            .outcome
    }

    /// Records a `group` message: the user belongs to `groupId` (an account,
    /// a company), described by `traits`.
    ///
    /// - Throws: the errors of ``record(_:parameters:)``.
    @discardableResult
    public func group(_ groupId: String, traits: [String: EventValue] = [:]) throws -> RecordOutcome {
        try accept(Message(EventType.group.rawValue, traits, type: .group, target: groupId), settle: nil).outcome
    }

    /// Records a `screen` message: the user saw the screen `name`.
    ///
    /// Screens enter no survey history: trigger rules count `track` events.
    ///
    /// - Throws: the errors of ``record(_:parameters:)``.
    @discardableResult
    public func screen(_ name: String, properties: [String: EventValue] = [:]) throws -> RecordOutcome {
        try accept(Message(name, properties, type: .screen), settle: nil).outcome
    }

    /// The identity events accepted now are recorded for, as the database
    /// holds it; returns once it is written. While consent is withheld, the
    /// identity in memory, which is not written.
    ///
    /// - Throws: ``SpoolError/notStarted`` before ``start()``.
    public func identity() async throws -> SpoolIdentity {
        guard let (log, consent) = state.withLock({ state in state.log.map { ($0, state.consent) } }) else {
            throw SpoolError.notStarted
        }
        let identities = self.identities
        guard consent else {
            let stamp = identities.current.identity
            if let anonymousID = stamp.anonymousID {
                let user = stamp.user
                return SpoolIdentity(
                    IdentityRow(
                        id: 0, anonymousID: anonymousID, userID: user.id, traitsJSON: user.traitsJSON,
                        createdAt: stamp.createdAt))
            }
            // Only the file's identity, read (no change is written without consent).
            return try await SpoolError.bridgingAsync {
                SpoolIdentity(try await log.database.run { try identities.persist(on: $0, changes: false) })
            }
        }
        return try await SpoolError.bridgingAsync {
            SpoolIdentity(try await log.database.run { try identities.persist(on: $0) })
        }
    }

    // MARK: - Context

    /// Sets the context every event accepted from now on refers to; nil:
    /// none. Events accepted before keep theirs.
    ///
    /// Each process sets its own (an app extension is another app); the
    /// database keeps one row per distinct context, so setting the same one
    /// at every launch adds nothing.
    ///
    /// - Throws: ``SpoolError/invalidEvent(_:)`` when a value cannot be
    ///   encoded (then nothing changed).
    public func setContext(_ context: EventContext?) throws {
        let json = try context?.encoded()
        identities.setContext(json, at: configuration.clock.now)
    }

    // MARK: - Middleware

    /// Adds a step every event passes before it is encoded and stored, after
    /// the ones added before it.
    ///
    /// Middleware runs on the thread that calls `record` (and `screen`,
    /// `identify`, `group`, `alias`), for priority events too, and for the
    /// survey lifecycle events (`survey_shown`…), which are recorded the same
    /// way. `identify`'s traits pass it before the identity keeps them, so a
    /// scrubber covers the user's traits too. `session_start`, which Spool appends itself when a session
    /// begins, does not pass it. Keep it fast: its time is the caller's. A
    /// middleware added
    /// or removed while events are recorded applies from the next event on.
    ///
    /// ```swift
    /// // Scrub: never store an email address.
    /// engine.addMiddleware { event in
    ///     event.parameters["email"] = nil
    ///     return .keep
    /// }
    /// // Sample: keep one debug event in ten.
    /// engine.addMiddleware { event in
    ///     event.name.hasPrefix("debug_") && Int.random(in: 0..<10) != 0 ? .drop(reason: "sampled") : .keep
    /// }
    /// ```
    ///
    /// - Returns: a registration; ``Registration/cancel()`` removes it.
    @discardableResult
    public func addMiddleware(_ middleware: @escaping Middleware) -> Registration {
        pipeline.add(middleware)
    }

    // MARK: - Persisting a change

    /// Writes the current identity's row now, so the change survives a
    /// restart even if no event follows; nothing while consent is withheld.
    /// A failure is reported; the row is written with the next event that
    /// carries it.
    func persistIdentity() {
        guard let log = state.withLock({ $0.consent ? $0.log : nil }) else { return }
        let (identities, diagnostics) = (self.identities, diagnosticsCenter)
        log.database.async { connection in
            guard let connection else { return }
            do {
                try identities.persist(on: connection)
            } catch {
                diagnostics.report(
                    .commitFailed, error: error,
                    "the identity change is not written yet; it is written with the next event")
            }
        }
    }

}
