import Foundation
import SpoolStorage
import Testing

@testable import Spool

/// The zlib-backed gzip helper: valid members, round trips, and refusal of
/// what is not gzip; and `GzipJob`, a body gzipped ahead by whichever thread
/// comes first. (The collector process decodes Spool's bodies with
/// Python's gzip module in the upload tests.)
struct GzipTests {
    @Test("compress writes one gzip member that inflates back to the same bytes")
    func roundTrip() throws {
        var text = ""
        for index in 0..<2_000 {
            text += #"{"id":"0190f3a2-7c1e-7b44-9a55-\#(index)","name":"screen_view","parameters":{"i":\#(index)}},"#
        }
        let input = Data(text.utf8)
        let compressed = try #require(Gzip.compress(input))
        #expect(Array(compressed.prefix(3)) == [0x1f, 0x8b, 0x08], "gzip magic and deflate")
        #expect(compressed.count * 5 < input.count, "event JSON compresses several-fold: \(compressed.count)")
        #expect(Gzip.decompress(compressed) == input)
    }

    @Test("an empty input is a valid 20-byte member, not an empty result")
    func emptyInput() throws {
        let compressed = try #require(Gzip.compress(Data()))
        #expect(compressed.count == 20)
        #expect(Gzip.decompress(compressed) == Data())
    }

    @Test("incompressible input still round-trips (the output bound holds)")
    func incompressible() throws {
        var generator = SystemRandomNumberGenerator()
        let input = Data((0..<100_000).map { _ in UInt8.random(in: 0...255, using: &generator) })
        let compressed = try #require(Gzip.compress(input))
        #expect(Gzip.decompress(compressed) == input)
    }

    @Test("decompress refuses what is not gzip, a truncated member, and output past its limit")
    func refusals() throws {
        #expect(Gzip.decompress(Data("{\"plain\":true}".utf8)) == nil)
        #expect(Gzip.decompress(Data()) == nil)
        let compressed = try #require(Gzip.compress(Data(repeating: UInt8(ascii: "x"), count: 100_000)))
        #expect(Gzip.decompress(compressed.prefix(compressed.count - 8)) == nil, "truncated")
        #expect(Gzip.decompress(compressed, limit: 1_000) == nil, "past the limit")
        // Two members in a row are one stream (RFC 1952).
        let two = try #require(Gzip.compress(Data("ab".utf8))) + (try #require(Gzip.compress(Data("cd".utf8))))
        #expect(Gzip.decompress(two) == Data("abcd".utf8))
    }

    // MARK: - GzipJob: a body read ahead, gzipped by whichever thread comes first

    /// A body's gzip, counting how many times it ran.
    final class CountedGzip: Sendable {
        let runs = Protected(0)
        func compress(_ body: Data) -> Data? {
            runs.withLock { $0 += 1 }
            return Gzip.compress(body)
        }
    }

    static let body = Data(
        String(repeating: #"{"name":"screen_view","parameters":{"screen":"home"}},"#, count: 200).utf8)

    @Test("a body its queue has not started is gzipped by the thread that asks, and the queue does not gzip it again")
    func jobTakenBeforeItsQueue() throws {
        let (queue, counted) = (DispatchQueue(label: "test.gzip"), CountedGzip())
        queue.suspend()
        let job = GzipJob(Self.body, on: queue, compress: counted.compress)
        #expect(!job.isDone)
        let taken = try #require(job.result())
        #expect(job.isDone)
        #expect(Gzip.decompress(taken) == Self.body)
        queue.resume()
        queue.sync {}
        #expect(counted.runs.withLock { $0 } == 1, "gzipped once")
        #expect(job.result() == taken)
    }

    @Test("a body its queue gzipped is taken as it is")
    func jobTakenAfterItsQueue() throws {
        let (queue, counted) = (DispatchQueue(label: "test.gzip"), CountedGzip())
        let job = GzipJob(Self.body, on: queue, compress: counted.compress)
        queue.sync {}
        #expect(job.isDone)
        #expect(Gzip.decompress(try #require(job.result())) == Self.body)
        #expect(counted.runs.withLock { $0 } == 1)
    }

    @Test("a body its queue is gzipping is waited for, not gzipped twice")
    func jobTakenWhileItsQueueRuns() async throws {
        let queue = DispatchQueue(label: "test.gzip")
        let (started, proceed, runs) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0), Protected(0))
        let job = GzipJob(Self.body, on: queue) { body in
            runs.withLock { $0 += 1 }
            started.signal()
            proceed.wait()
            return Gzip.compress(body)
        }
        started.wait()
        #expect(!job.isDone, "the queue holds it")
        let taken = Task.detached { job.result() }
        proceed.signal()
        #expect(Gzip.decompress(try #require(await taken.value)) == Self.body)
        #expect(runs.withLock { $0 } == 1)
    }

    @Test("zlib failing gives nil: the body goes uncompressed")
    func jobWhoseGzipFails() {
        let queue = DispatchQueue(label: "test.gzip")
        queue.suspend()
        let job = GzipJob(Self.body, on: queue) { _ in nil }
        #expect(job.result() == nil)
        #expect(job.isDone)
        queue.resume()
        queue.sync {}
        #expect(job.result() == nil)
    }
}
