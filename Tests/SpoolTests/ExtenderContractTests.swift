import Foundation
@_spi(FormatAuthoring) @_spi(TransportAuthoring) import Spool
import Testing

/// The extenders' interfaces, written as an SDK author would, with no
/// `@testable`: a transport of one's own (`@_spi(TransportAuthoring)`) and a
/// batch format of one's own (`@_spi(FormatAuthoring)`). If a name drifts or
/// leaves its SPI group, this stops compiling.
struct ExtenderContractTests {
    /// Keeps every request and answers each with a 200.
    final class KeepingTransport: UploadTransport {
        let requests = PublicContractTests.Mutexed<[UploadRequest]>([])

        func send(_ request: UploadRequest) async throws -> UploadResponse {
            requests.mutate { $0.append(request) }
            _ = request.urlRequest  // what a URLSession-based transport sends
            return UploadResponse(status: 200, headers: ["Content-Type": "text/plain"], body: Data("ok".utf8))
        }
    }

    /// One event id per line; a 200 takes every event but the last, as a
    /// collector answering per event would.
    struct IDLines: BatchFormat {
        var contentType: String { "text/plain" }
        var compressesByDefault: Bool { false }
        func appendPrologue(sentAt: Date, to body: inout [UInt8]) {}
        func append(_ event: BatchEvent, to body: inout [UInt8]) { body.append(contentsOf: event.id.utf8) }
        func appendEpilogue(sentAt: Date, to body: inout [UInt8]) {}
        func verdict(for response: UploadResponse, eventCount: Int) -> UploadVerdict {
            guard response.status == 200 else { return .standard(for: response) }
            return .perEvent((0..<eventCount).map { $0 < eventCount - 1 ? .accepted : .rejected(reason: "last") })
        }
    }

    @Test("a transport and a format of one's own carry a batch, and the format's verdict decides")
    func transportAndFormatOfOnesOwn() async throws {
        let transport = KeepingTransport()
        let engine = EventEngine(
            configuration: EngineConfiguration(
                collectorURL: URL(string: "https://collector.invalid/v1/ids")!,
                // No timer pass before the test's flush, however long a loaded run takes.
                uploadInterval: 3_600,
                dispatcher: DefaultEventDispatcher(backingStore: .memory, format: IDLines(), transport: transport)))
        try await engine.start()
        try engine.record("purchase")
        try await engine.flush()
        let requests = transport.requests.current
        #expect(requests.count == 1)
        #expect(requests.first?.eventCount == 2, "session_start and purchase")
        #expect(requests.first?.value(forHeader: "content-type") == "text/plain")
        let statistics = try await engine.uploadStatistics()
        #expect(statistics.pending == 0)
        #expect(statistics.deadLettered == 1, "the format's verdict, not the status alone, settled the events")
        await engine.close()
    }
}
