import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// S15 across real SIGKILLs: the property values a survey keeps are written
/// with their events or not at all, and the triggers a killed process
/// reported are the ones its log says (Tests/CrashChild, `--surveys`).
struct SurveyCrashTests {
    /// What the child's surveys wait for (Tests/CrashChild/SurveyMode.swift).
    static let counts = [1, 5, 20, 50, 100, 200, 400, 800]

    @Test(
        "S15: after SIGKILLs mid-commit, the kept values, the history and every trigger agree with the log",
        .needsChildProcesses)
    func valuesAndTriggersSurviveSIGKILL() async throws {
        let child = buildProductsDirectory.appendingPathComponent("spool-crash-child").path
        try #require(FileManager.default.isExecutableFile(atPath: child), "build the package first: \(child)")
        let directory = TemporaryDirectory()
        let path = directory.databaseURL.path
        var random = FastRandom(seed: UInt64(Date().timeIntervalSince1970))
        // The deadline bounds the test; see CrashTests for the sanitizer's.
        let deadline = Date().addingTimeInterval(isThreadSanitized ? 300 : 60)
        var reported: [(run: String, survey: String, marker: String)] = []
        var acknowledged = 0
        for run in 0..<8 where Date() < deadline {
            let tag = "r\(run)"
            let delay = 50 + Int(random.next() % 400)
            let (lines, killed) = try await runUntilKilled(
                child, [path, tag, "--surveys"], milliseconds: delay, afterLine: "READY")
            #expect(killed, "\(tag): ended by the SIGKILL")
            acknowledged += lines.count { $0.hasPrefix("ACK ") }
            for line in lines where line.hasPrefix("TRIGGER ") {
                let words = line.split(separator: " ").map(String.init)  // TRIGGER exactly N marker
                reported.append((tag, "\(words[1]) \(words[2])", words[3]))
            }
        }
        #expect(acknowledged > 0, "the child acknowledged nothing; the kills came too early")

        let connection = try Connection(path: path, options: ConnectionOptions())
        defer { connection.close() }
        #expect(try connection.scalarString("PRAGMA integrity_check") == "ok")
        let purchases = try connection.readEvents(after: 0, limit: .max, now: 0).filter { $0.name == "purchase" }.map {
            event -> (marker: String, amount: Int) in
            let parameters = try JSONReader.parseObject(event.parametersJSON)
            return (parameters["id"]?.stringValue ?? "", parameters["amount"]?.intValue ?? -1)
        }
        // The values kept are exactly those of the committed events.
        var amounts: [Int: Int] = [:]
        for purchase in purchases { amounts[purchase.amount, default: 0] += 1 }
        var kept: [Int: Int] = [:]
        try connection.withStatement(
            "SELECT value, sum(occurrences) FROM event_history_values WHERE name = 'purchase' GROUP BY value"
        ) { statement in
            while try statement.step() { kept[statement.int(at: 0)] = statement.int(at: 1) }
        }
        #expect(kept == amounts)
        #expect(
            try connection.scalarInt("SELECT sum(occurrences) FROM event_history WHERE name = 'purchase'")
                == purchases.count)
        // Each survey's triggers, in log order, counted from the log.
        var expected: [String: [String]] = [:]
        var above = 0
        for purchase in purchases {
            if purchase.amount > 50 { above += 1 }
            if Self.counts.contains(above) { expected["exactly \(above)", default: []].append(purchase.marker) }
        }
        #expect(!reported.isEmpty, "no trigger was reported")
        for (survey, markers) in Dictionary(grouping: reported, by: \.survey) {
            let got = markers.map(\.marker)
            #expect(Set(got).isSubset(of: expected[survey] ?? []), "\(survey): only what the log says")
            // Delivery follows log order: what one run reported is a prefix
            // of what its events triggered.
            for (run, ofRun) in Dictionary(grouping: markers, by: \.run) {
                let due = (expected[survey] ?? []).filter { $0.hasPrefix("\(run)-") }
                #expect(Array(due.prefix(ofRun.count)) == ofRun.map(\.marker), "\(survey) in \(run)")
            }
        }
        // The next launch reads the same counts.
        let engine = try await startedEngine(directory) {
            $0.maximumRetainedEvents = nil
            $0.maximumHistoryRows = nil
        }
        try engine.surveys.register(Survey(id: "keeper", historyProperties: ["purchase": ["amount"]]))
        #expect(
            try await engine.surveys.evaluate(
                .eventFrequency(
                    EventFrequency("purchase", .exactly, above, where: .property("amount", .greaterThan(50))))))
        await engine.close()
    }
}
