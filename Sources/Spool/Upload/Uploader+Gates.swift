import Foundation
import SpoolStorage

/// What holds uploads back besides the collector: the network path, the
/// upload policy, and a pause the app asked for.
extension Uploader {
    /// A network path is usable.
    var networkAvailable: Bool { path.usable }

    /// The policy lets uploads use the path there is.
    var policyAllows: Bool { policy == .always || !path.metered }

    /// The system reported the path. When uploads may go again, what waits
    /// goes out at once: the backoff was for a collector that could not be
    /// reached.
    func networkChanged(_ path: NetworkPathState) {
        let (before, was) = (networkAvailable && policyAllows, self.path)
        self.path = path
        guard path != was, !before, networkAvailable && policyAllows else { return }
        retryAt = nil
        retryGeneration += 1
        if signals.withLock({ $0.pending }) > 0 { trigger(force: false) }
    }

    /// Changes which networks uploads may use; allowed now, what waits goes
    /// out.
    func setPolicy(_ policy: UploadPolicy) {
        let before = policyAllows
        self.policy = policy
        if !before, policyAllows, signals.withLock({ $0.pending }) > 0 { trigger(force: false) }
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

    static let meteredReason =
        "the network is metered and uploads use unmetered networks only (UploadPolicy.unmeteredOnly)"

    static let pausedReason = "uploads are paused (pauseUploads()); resumeUploads() lets them go"
}
