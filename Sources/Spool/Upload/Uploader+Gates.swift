import Foundation
import SpoolStorage

/// What holds uploads back besides the collector: the network path, the
/// upload policy, and a pause the app asked for. The rules are
/// ``UploadSchedule``'s (``UploadSchedule/gate(force:now:)``).
extension Uploader {
    /// The system reported the path. When uploads may go again, what waits
    /// goes out at once: the backoff was for a collector that could not be
    /// reached.
    func networkChanged(_ path: NetworkPathState) {
        pull(schedule.networkChanged(path, pending: hasPending))
    }

    /// Changes which networks uploads may use; allowed now, what waits goes
    /// out.
    func setPolicy(_ policy: UploadPolicy) {
        pull(schedule.setPolicy(policy, pending: hasPending))
    }

    /// Pauses uploads in the database, for every process using the file
    /// and across launches, or resumes them (then what waits goes out).
    /// Pause while quiescent (``pause()``): the pass in flight has ended.
    func setUploadsPaused(_ paused: Bool) throws {
        let now = self.now
        try log.database.onQueue { try $0.setUploadsPaused(paused, at: now) }
        signals.withLock { $0.paused = paused }
        if !paused { trigger(force: false) }
    }

    static var meteredReason: String { UploadSchedule<Void, Void>.meteredReason }

    static var pausedReason: String { UploadSchedule<Void, Void>.pausedReason }
}
