import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Durability proven with real SIGKILLs of a child process that appends and
/// acknowledges events (Tests/CrashChild).
struct CrashTests {
    @Test(.needsChildProcesses)
    func everyAcknowledgedEventSurvivesSIGKILLExactlyOnceAndInOrder() async throws {
        let child = buildProductsDirectory.appendingPathComponent("spool-crash-child").path
        try #require(FileManager.default.isExecutableFile(atPath: child), "build the package first: \(child)")
        let directory = TemporaryDirectory()
        let path = directory.databaseURL.path
        var random = FastRandom(seed: UInt64(Date().timeIntervalSince1970))
        var acknowledged: [(tag: String, ids: [String])] = []
        // The deadline bounds the test (Swift Testing's .timeLimit needs iOS 16
        // / macOS 13): every round kills its child within 0.4 s.
        // Under the thread sanitizer each await waits its turn behind the
        // whole suite's slower jobs: the bound is five times wider.
        let deadline = Date().addingTimeInterval(isThreadSanitized ? 300 : 60)

        for run in 0..<24 where Date() < deadline {
            let tag = "r\(run)"
            // Kill at a random moment: sometimes during start-up and migration,
            // mostly in the middle of group commits.
            let delay = 20 + Int(random.next() % 380)
            let (lines, killed) = try await runUntilKilled(child, [path, tag], milliseconds: delay)
            #expect(killed, "\(tag): ended by the SIGKILL")
            let ids = lines.filter { $0.hasPrefix("ACK ") }.map { String($0.dropFirst(4)) }
            acknowledged.append((tag, ids))
        }

        let totalAcknowledged = acknowledged.reduce(0) { $0 + $1.ids.count }
        #expect(acknowledged.count >= 20)
        #expect(totalAcknowledged > 0, "the child acknowledged nothing; the kills came too early")

        let connection = try Connection(path: path, options: ConnectionOptions())
        defer { connection.close() }
        #expect(try connection.scalarString("PRAGMA integrity_check") == "ok")
        let events = try connection.readEvents(after: 0, limit: .max, now: 0)
        var seqByID: [String: [Int64]] = [:]
        for event in events { seqByID[event.id, default: []].append(event.seq) }

        for (tag, ids) in acknowledged {
            // Each acknowledged event is present exactly once…
            for id in ids { #expect(seqByID[id]?.count == 1, "\(tag): acknowledged \(id) present once") }
            // …in the order it was acknowledged.
            let positions = ids.compactMap { seqByID[$0]?.first }
            #expect(positions == positions.sorted(), "\(tag): acknowledged order kept")
            // And the run's committed events are a gap-free prefix 1, 2, 3… of what it appended.
            let counters = events.filter { $0.name == "crash_\(tag)" }.map { event -> Int in
                let digits = event.parametersJSON.drop { !$0.isNumber }.prefix { $0.isNumber }
                return Int(digits) ?? -1
            }
            #expect(
                counters == Array(stride(from: 1, through: counters.count, by: 1)), "\(tag): no holes, no reordering")
            #expect(counters.count >= ids.count)
        }
    }
}
