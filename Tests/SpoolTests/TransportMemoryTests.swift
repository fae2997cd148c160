import Foundation
import Testing

@_spi(TransportAuthoring) @testable import Spool
@testable import SpoolStorage

/// What the built-in transport keeps once an upload is answered: nothing.
/// The uploader holds each request's cancel handle until the dispatch
/// timeout (30 s by default), so a handle that kept its request alive would
/// keep every body (up to 3.5 MB each) sent in the last 30 s.
@Suite(.needsChildProcesses)
struct TransportMemoryTests {
    /// Sends a body whose storage reports its own release, keeps the cancel
    /// handle as the uploader does, and waits (a bounded poll) for the
    /// body's release after the answer.
    func bodyIsReleased(_ collector: TestCollector, redirect: Bool) async throws -> Bool {
        if redirect {
            try await collector.control([
                "mode": "redirect", "status": 307, "location": "http://127.0.0.1:\(collector.port)/other", "times": 1,
            ])
        }
        let released = Protected(false)
        let transport = HTTPTransport(requestTimeout: 5)
        let answered = Promise<Int>()
        let cancel: @Sendable () -> Void
        do {
            let bytes = Array(#"{"events":[]}"#.utf8) + Array(repeating: UInt8(ascii: " "), count: 64 << 10)
            let storage = UnsafeMutableRawPointer.allocate(byteCount: bytes.count, alignment: 1)
            storage.copyMemory(from: bytes, byteCount: bytes.count)
            let body = Data(
                bytesNoCopy: storage, count: bytes.count,
                deallocator: .custom { pointer, _ in
                    pointer.deallocate()
                    released.withLock { $0 = true }
                })
            let request = UploadRequest(
                url: collector.url, headers: ["Content-Type": "application/json"], body: body, eventCount: 0, timeout: 5
            )
            cancel = transport.send(request) { result in
                answered.fulfill((try? result.get())?.status ?? -1)  // try?: a failure shows as -1
            }
        }
        #expect(await answered.value == 200)
        #expect(collector.requests().count == (redirect ? 2 : 1))
        let gone = try await waitUntil(timeout: 5) { released.withLock { $0 } }
        withExtendedLifetime(cancel) {}
        return gone
    }

    @Test("an answered request's body is released while its cancel handle is still held")
    func answeredBodyIsReleased() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        #expect(try await bodyIsReleased(collector, redirect: false), "the body outlived its exchange")
    }

    @Test("a body sent again after a followed redirect is released while its cancel handle is still held")
    func redirectedBodyIsReleased() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        #expect(try await bodyIsReleased(collector, redirect: true), "the body outlived its exchange")
    }
}
