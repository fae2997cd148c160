import Foundation
@_spi(TransportAuthoring) import Spool

/// What a refused event costs at the collector boundary: the requests a
/// bisection spends to single out one bad event in a backlog.
struct CollectorBoundaryBenchmarks {
    let quick: Bool
    let report: Report

    /// Answers 400 to any body carrying an event named `bad_event`, 2xx to
    /// the rest; counts requests.
    final class RefusingTransport: CallbackUploadTransport {
        let requests = Locked(0)
        let refusing = Locked(false)
        static let marker = Data(#""bad_event""#.utf8)

        func send(
            _ request: UploadRequest, completion: @escaping @Sendable (Result<UploadResponse, any Error>) -> Void
        ) -> @Sendable () -> Void {
            completion(.success(answer(request)))
            return {}
        }

        func send(_ request: UploadRequest) async throws -> UploadResponse {
            answer(request)
        }

        private func answer(_ request: UploadRequest) -> UploadResponse {
            requests.withLock { $0 += 1 }
            guard refusing.withLock({ $0 }) else { return UploadResponse(status: 503) }
            return UploadResponse(status: request.body.range(of: Self.marker) != nil ? 400 : 200)
        }
    }

    func run() async throws {
        let backlog = 1_000
        let batchSize = 100
        let scratch = Scratch("bisection")
        let transport = RefusingTransport()
        let dispatcher = DefaultEventDispatcher(
            request: UploadRequestOptions(compression: .identity), transport: transport)
        let engine = EventEngine(
            configuration: DrainBenchmarks.stubbedConfiguration(
                database: scratch.database, dispatcher: dispatcher, batchSize: batchSize,
                maximumRetainedEvents: backlog * 2))
        try await engine.start()
        for index in 0..<backlog {
            try engine.recordRetrying(
                index == backlog / 2 + 7 ? "bad_event" : "good_event", parameters: ["i": .int(index)])
        }
        try await engine.settle()
        transport.requests.withLock { $0 = 0 }
        transport.refusing.withLock { $0 = true }
        try await engine.flush()
        let statistics = try await engine.uploadStatistics()
        await engine.close()
        let requests = transport.requests.withLock { $0 }
        let batches = (backlog + 1 + batchSize - 1) / batchSize  // session_start too
        let extra = requests - batches
        // Each level of a split halves the range: ⌈log2 n⌉ levels, two
        // requests each.
        let bound = 2 * log2(Double(batchSize)).rounded(.up)
        report.add(
            Row(
                area: "upload", name: "requests per refused event, 1,000-event backlog with 1 bad event",
                value: Double(extra), unit: "requests",
                detail:
                    "\(requests) requests for \(batches) batches of \(batchSize); \(statistics.deadLettered) dead-lettered, \(statistics.pending) left; bound 2·⌈log2(\(batchSize))⌉",
                target: bound, comparison: .atMost, exact: true))
    }
}
