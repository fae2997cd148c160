import Foundation

extension EventLog {
    /// One engine start, and the monotonic clock it measures in: the writer
    /// stamps each event it commits with it (`events.launch`,
    /// `events.launch_ms`), so an event's age at upload is measured on that
    /// clock while the same launch uploads it. Another launch (after a
    /// relaunch, or another process) cannot compare its clock with this
    /// one's, and measures the age on the wall clock instead.
    ///
    /// The monotonic clock is read once per commit, not per `record`: an
    /// event's `launch_ms` is the commit's reading less the wall clock's
    /// time since the event was recorded (milliseconds, unless it waited
    /// for a session), so the caller's thread reads no other clock.
    package struct Launch: Sendable, Hashable {
        /// This start's number on the file (`counters.launches`).
        package let id: Int64
        /// The clock's ``SpoolClock/monotonic`` reading at the start: what
        /// `launch_ms` counts from.
        package let origin: Double

        package init(id: Int64, origin: Double) {
            self.id = id
            self.origin = origin
        }

        /// Milliseconds from the origin to the monotonic reading `monotonic`.
        package func milliseconds(at monotonic: Double) -> Int64 {
            Self.milliseconds(monotonic - origin)
        }

        /// `seconds` in whole milliseconds, rounded; never traps (a value
        /// that is not finite is 0, one past 9e15 seconds is clamped there).
        package static func milliseconds(_ seconds: Double) -> Int64 {
            guard seconds.isFinite else { return 0 }
            let bound = 9e15  // seconds: 9e18 milliseconds fits in Int64
            return Int64((min(max(seconds, -bound), bound) * 1_000).rounded())
        }

        /// What one commit stamps its events with: `clock` read now, or nil
        /// when it has no monotonic reading.
        func commitStamp(_ clock: any SpoolClock) -> CommitStamp? {
            guard let monotonic = clock.monotonic else { return nil }
            return CommitStamp(launch: id, now: milliseconds(at: monotonic), wall: clock.now)
        }
    }

    /// One commit's reading of its launch's clocks.
    struct CommitStamp {
        let launch: Int64
        /// Now on the launch's monotonic clock, in milliseconds from its origin.
        let now: Int64
        /// Now on the wall clock, in seconds since 1970.
        let wall: Double

        /// Binds `launch` at `index` (once per commit: the statement keeps it)
        /// or NULL to it and the column after.
        static func bindLaunch(_ stamp: CommitStamp?, to insert: Statement, at index: Int32) throws {
            if let stamp {
                try insert.bind(stamp.launch, at: index)
            } else {
                try insert.bindNull(at: index)
                try insert.bindNull(at: index + 1)
            }
        }

        /// Binds the `launch_ms` of an event recorded at `recordedAt` (wall
        /// clock) at `index`.
        func bindMilliseconds(recordedAt: Double, to insert: Statement, at index: Int32) throws {
            try insert.bind(now - Launch.milliseconds(wall - recordedAt), at: index)
        }
    }

    /// Stamps the events committed from now on with `launch`.
    package func setLaunch(_ launch: Launch?) {
        state.withLock { $0.launch = launch }
    }

    /// The launch the writer stamps events with, if any.
    package var launch: Launch? {
        state.withLock { $0.launch }
    }
}

extension Connection {
    /// Numbers a new engine start on this file (`counters.launches`), in
    /// the caller's transaction or one of its own.
    package func beginLaunch() throws -> Int64 {
        try withStatement(
            """
            INSERT INTO counters (name, value) VALUES ('launches', 1) \
            ON CONFLICT (name) DO UPDATE SET value = value + 1 RETURNING value
            """
        ) { statement in
            guard try statement.step() else { return 1 }
            let launch = statement.int64(at: 0)
            // RETURNING is stepped to its end for the write to complete.
            while try statement.step() {}
            return launch
        }
    }
}
