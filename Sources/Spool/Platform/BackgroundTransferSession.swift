import Foundation
import SpoolStorage

/// A background transfer session: the system sends the files handed to it
/// while the app is suspended or not running, and reports each answer —
/// in this launch, or in a later one once a session with the same
/// identifier exists again.
protocol BackgroundTransferSession: AnyObject, Sendable {
    /// Hands the upload of `bodyFile` with `request`'s headers to the system.
    /// `batchID` comes back in its report.
    func upload(_ request: UploadRequest, bodyFile: URL, batchID: String) throws

    /// Cancels every transfer the system holds for this session (the data
    /// was erased); their reports may still come, as failures.
    func cancelAll()
}

/// What the system reports of a background session.
enum BackgroundTransferEvent: Sendable {
    /// The answer to the transfer `batchID`: a response, or a failure
    /// without one.
    case finished(batchID: String, answer: UploadClient.Answer)
    /// Every report the system held for the session has been delivered
    /// (after a relaunch for it, the app may now be suspended again).
    case deliveredAll
}

/// The background sessions of one platform, by identifier: one session per
/// identifier per process, as the system allows. Reports that come while no
/// engine is attached (a relaunch, before `start()` got that far) wait for
/// the engine that attaches; the system's completion handler for a relaunch
/// is called once the attached engine has settled what was delivered.
final class BackgroundTransferCenter: Sendable {
    private struct Entry {
        var session: (any BackgroundTransferSession)?
        var receiver: (@Sendable (BackgroundTransferEvent) -> Void)?
        var waiting: [BackgroundTransferEvent] = []
        /// The system's handlers for a relaunch, called once all is settled.
        var completionHandlers: [@Sendable () -> Void] = []
    }

    private let entries = Protected([String: Entry]())

    /// Attaches `receiver` to the session `identifier` (made through `make`
    /// the first time): reports come to it from now on, those waiting first.
    ///
    /// - Returns: the session, or nil when the platform has none.
    func attach(
        _ identifier: String,
        make: (@escaping @Sendable (BackgroundTransferEvent) -> Void) -> (any BackgroundTransferSession)?,
        receiver: @escaping @Sendable (BackgroundTransferEvent) -> Void
    ) -> (any BackgroundTransferSession)? {
        let existing = entries.withLock { $0[identifier]?.session }
        let session = existing ?? make { [weak self] event in self?.deliver(event, for: identifier) }
        guard let session else { return nil }
        let waiting = entries.withLock { entries -> [BackgroundTransferEvent] in
            var entry = entries[identifier] ?? Entry()
            entry.session = session
            entry.receiver = receiver
            defer {
                entry.waiting = []
                entries[identifier] = entry
            }
            return entry.waiting
        }
        for event in waiting { receiver(event) }
        return session
    }

    /// The engine closed: reports wait for the next one.
    func detach(_ identifier: String) {
        entries.withLock { $0[identifier]?.receiver = nil }
    }

    /// The app delegate's `handleEventsForBackgroundURLSession`: keeps the
    /// system's handler until the reports are settled.
    func handleEvents(for identifier: String, completionHandler: @escaping @Sendable () -> Void) {
        entries.withLock { entries in
            entries[identifier, default: Entry()].completionHandlers.append(completionHandler)
        }
    }

    /// The attached engine settled everything delivered so far: the
    /// system's handlers run (the app may be suspended after them).
    func settledAll(_ identifier: String) -> [@Sendable () -> Void] {
        entries.withLock { entries in
            defer { entries[identifier]?.completionHandlers = [] }
            return entries[identifier]?.completionHandlers ?? []
        }
    }

    private func deliver(_ event: BackgroundTransferEvent, for identifier: String) {
        let receiver = entries.withLock { entries -> (@Sendable (BackgroundTransferEvent) -> Void)? in
            guard let receiver = entries[identifier]?.receiver else {
                entries[identifier, default: Entry()].waiting.append(event)
                return nil
            }
            return receiver
        }
        receiver?(event)
    }
}
