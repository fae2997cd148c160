// The README's quick start, line for line below this comment: scripts/check-readme
// fails when the two differ, and QuickStartTests runs these functions against
// the test collector.

import Foundation
import Spool

/// At launch: one engine for the app's life. Keep a reference to it.
func startAnalytics(collector: URL, directory: URL) async throws -> EventEngine {
    let engine = EventEngine(configuration: .uploading(to: collector, in: directory))
    engine.on("purchase") { event in print("committed", event.name, event.id) }
    try await engine.start()  // creates `directory` if missing, and OPTEventQueue.sqlite in it
    return engine
}

/// From any thread: `record` returns in microseconds, the commit follows.
func checkout(_ engine: EventEngine) async throws {
    try engine.record("purchase", parameters: ["amount": 9.99, "currency": "EUR"])
    do {
        try await engine.flush()  // upload now; without it, uploads go by size and by timer
    } catch {
        print("kept for a later upload:", error)  // offline, or the collector refused: nothing is lost
    }
}
