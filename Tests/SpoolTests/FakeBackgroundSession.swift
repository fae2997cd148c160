import Foundation

@_spi(TransportAuthoring) @testable import Spool
@testable import SpoolStorage

/// The system's background transfer service, scripted: it keeps what it was
/// handed, and sends it when the test says so — a real POST of the body
/// file, with the request's headers, to the real test collector — then
/// reports the answer, as the system does, to whichever engine is attached
/// (or to none: the report then waits for the next launch's engine).
final class FakeBackgroundSession: BackgroundTransferSession {
    struct Transfer: Sendable {
        let batchID: String
        let request: UploadRequest
        let bodyFile: URL
    }

    private struct State {
        var identifier: String?
        var events: (@Sendable (BackgroundTransferEvent) -> Void)?
        /// Handed over and not yet answered, in order.
        var pending: [Transfer] = []
        /// Every hand-off, answered or not.
        var handed: [Transfer] = []
        var cancelled = 0
    }

    private let state = Protected(State())

    /// The center hands the session's reports on from here.
    func connect(identifier: String, events: @escaping @Sendable (BackgroundTransferEvent) -> Void) {
        state.withLock { state in
            state.identifier = identifier
            state.events = events
        }
    }

    func upload(_ request: UploadRequest, bodyFile: URL, batchID: String) throws {
        let transfer = Transfer(batchID: batchID, request: request, bodyFile: bodyFile)
        state.withLock { state in
            state.pending.append(transfer)
            state.handed.append(transfer)
        }
    }

    func cancelAll() {
        state.withLock { state in
            state.cancelled += 1
            state.pending = []
        }
    }

    // MARK: What the test does

    /// The session's identifier, once an engine made it.
    var identifier: String? { state.withLock { $0.identifier } }
    /// Transfers handed over and not answered yet.
    var pending: [Transfer] { state.withLock { $0.pending } }
    /// Every hand-off so far.
    var handed: [Transfer] { state.withLock { $0.handed } }
    /// How many times everything was cancelled.
    var cancelled: Int { state.withLock { $0.cancelled } }

    /// Sends the oldest pending transfer as the system does (its file's
    /// bytes, its headers) and reports the collector's answer.
    ///
    /// - Returns: the transfer and the collector's status.
    @discardableResult
    func completeNext() async throws -> (Transfer, Int) {
        let transfer = try takeNext()
        let body = try Data(contentsOf: transfer.bodyFile)
        var request = transfer.request
        request.body = body
        let response = try await HTTPTransport(requestTimeout: 10).send(request)
        report(.finished(batchID: transfer.batchID, answer: .response(response, compressed: false)))
        return (transfer, response.status)
    }

    /// Reports the oldest pending transfer as failed without an answer.
    @discardableResult
    func failNext(_ reason: String = "The network connection was lost.") throws -> Transfer {
        let transfer = try takeNext()
        report(.finished(batchID: transfer.batchID, answer: .failed(reason)))
        return transfer
    }

    /// Reports `answer` for `batchID`, whether or not it is pending (a late
    /// or repeated report).
    func report(_ batchID: String, status: Int, body: String = "") {
        let response = UploadResponse(status: status, body: Data(body.utf8))
        report(.finished(batchID: batchID, answer: .response(response, compressed: false)))
    }

    /// Tells the app every report of a relaunch has been delivered.
    func deliveredAll() {
        report(.deliveredAll)
    }

    private func takeNext() throws -> Transfer {
        try state.withLock { state in
            guard !state.pending.isEmpty else { throw FakeSessionError.nothingPending }
            return state.pending.removeFirst()
        }
    }

    private func report(_ event: BackgroundTransferEvent) {
        state.withLock { $0.events }?(event)
    }

    enum FakeSessionError: Error { case nothingPending }
}
