import Foundation
import Spool

// The loss mode of spool-crash-child: another process on the file loses
// events the uploader of the test's process has not sent (see main.swift for
// the command line).

/// Records `count` events into an engine keeping at most `bound`, with no
/// uploader of its own, and closes it.
func runOverflow(_ url: URL, bound: Int, count: Int) async throws {
    let engine = EventEngine(configuration: EngineConfiguration(database: .file(url), maximumRetainedEvents: bound))
    try await engine.start()
    for index in 0..<max(0, count - 1) { try engine.record("overflow", parameters: ["i": .int(index)]) }
    _ = try await engine.recordDurably("overflow", parameters: ["i": .int(count - 1)])
    await engine.close()
    emit("DONE")
}
