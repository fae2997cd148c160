import Foundation
import SpoolStorage

// MARK: - Background transfers
//
// With ``EngineConfiguration/backgroundTransfers`` on, the uploader hands the
// batch due in the background to the system's background session
// (``Uploader/handOff(_:_:)``), and settles it when the system reports. The
// reports come through the platform's ``BackgroundTransferCenter``; in the
// background each is settled in a background window, and the system's
// completion handler for a relaunch runs once what it delivered is settled.

extension EventEngine {
    /// Passes the system's relaunch for a background session on to Spool:
    /// call it from `application(_:handleEventsForBackgroundURLSession:completionHandler:)`.
    /// Spool calls `completionHandler` on the main thread once it has
    /// settled every report the system delivered (the app may be suspended
    /// after it).
    ///
    /// - Returns: false when `identifier` is not one of Spool's sessions
    ///   (then the app handles it, and Spool keeps nothing).
    @MainActor
    public static func handleEventsForBackgroundURLSession(
        _ identifier: String, completionHandler: @escaping () -> Void
    ) -> Bool {
        guard identifier.hasPrefix(BackgroundTransfers.identifierPrefix) else { return false }
        let handler = MainThreadCall(completionHandler)
        SystemPlatform.shared.backgroundTransfers.handleEvents(for: identifier) { handler.run() }
        return true
    }

    /// The background session's identifier, when background transfers are
    /// configured for a database file.
    var backgroundSessionIdentifier: String? {
        guard let transfers = configuration.backgroundTransfers, case .file(let file) = configuration.database else {
            return nil
        }
        return transfers.sessionIdentifier(for: file)
    }

    /// Attaches `uploader` to the background session, when background
    /// transfers are configured, the platform has such sessions and uploads
    /// go through Spool's own transport.
    func startBackgroundTransfers(_ uploader: Uploader) async {
        guard let identifier = backgroundSessionIdentifier, let transfers = configuration.backgroundTransfers,
            uploader.sendsThroughBuiltInTransport
        else { return }
        let platform = configuration.platform
        // One report after the other: the end of a relaunch's deliveries is
        // handled after the answers that came before it.
        let last = Protected<Task<Void, Never>?>(nil)
        let session = platform.backgroundTransfers.attach(
            identifier,
            make: { events in
                platform.makeBackgroundSession(
                    identifier: identifier, sharedContainer: transfers.sharedContainerIdentifier, events: events)
            },
            receiver: { [weak self, weak uploader] event in
                guard let self, let uploader else { return }
                last.withLock { last in
                    // Unstructured: the system's delegate queue does not wait for the settling.
                    last = Task { [previous = last] in
                        await previous?.value
                        await self.received(event, uploader: uploader, identifier: identifier)
                    }
                }
            })
        guard let session else { return }
        let state = self.state
        await uploader.enableHandoffs(
            HandoffSettings(
                session: session, identifier: identifier, resendAfter: transfers.resendAfter,
                wanted: { state.withLock { $0.inBackground } }))
    }

    /// What the system reported of the session: an answer is settled (in a
    /// background window when the database is suspended); the end of a
    /// relaunch's deliveries runs the system's completion handler once all
    /// is settled.
    private func received(_ event: BackgroundTransferEvent, uploader: Uploader, identifier: String) async {
        if case .finished(let batchID, let answer) = event {
            await uploader.receive(batchID: batchID, answer: answer)
        }
        do {
            try await withDatabaseAwake { try await uploader.settleReceived() }
        } catch {
            // A report not settled here (the device is locked, no background
            // time, the collector refused) stays with the uploader for its
            // next pass, or its hand-off is sent again: nothing is lost.
        }
        guard case .deliveredAll = event else { return }
        let platform = configuration.platform
        for handler in platform.backgroundTransfers.settledAll(identifier) {
            platform.completeBackgroundEvents(handler)
        }
    }
}

/// The system's completion handler, carried to the main thread.
private struct MainThreadCall: @unchecked Sendable {
    // Safe: only run by SystemPlatform.completeBackgroundEvents, on the main
    // thread, where the system gave it.
    private let body: () -> Void

    init(_ body: @escaping () -> Void) { self.body = body }

    func run() { body() }
}
