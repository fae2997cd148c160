import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// P3: the real sqlite3 CLI reads what the engine wrote.
@Suite(.needsChildProcesses)
struct SQLiteCLITests {
    static var sqlite3: String? {
        ["/usr/bin/sqlite3", "/usr/local/bin/sqlite3", "/opt/homebrew/bin/sqlite3"]
            .first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Writes a small database through the engine: 30 events, two consumers.
    func writeDatabase(_ directory: TemporaryDirectory) async throws {
        let log = EventLog(database: try DatabaseQueue(path: directory.databaseURL.path))
        _ = try await log.registerConsumer("uploader", startingAt: .oldest)
        _ = try await log.registerConsumer("listener:crm", startingAt: .oldest)
        for index in 0..<30 {
            try log.append(
                EventRecord(
                    name: index % 3 == 0 ? "purchase" : "screen_view",
                    parametersJSON: #"{"index":\#(index),"price":9.99,"screen":"home"}"#,
                    recordedAt: 1_700_000_000 + Double(index), sessionID: "s1", addsToHistory: true))
        }
        try await log.waitUntilAllDurable()
        try await log.advanceConsumer("uploader", to: 20)
        try await log.advanceConsumer("listener:crm", to: 5)
        await log.close()
        log.database.close()
    }

    @Test("P3: the views and json_extract answer at the sqlite3 CLI")
    func viewsAnswerAtTheCLI() async throws {
        let sqlite3 = try #require(Self.sqlite3, "install the sqlite3 CLI (apt-get install sqlite3)")
        let directory = TemporaryDirectory()
        try await writeDatabase(directory)
        let path = directory.databaseURL.path

        let lag = try await runProcess(
            sqlite3, [path, "SELECT consumer, position, pending FROM consumer_lag ORDER BY consumer;"])
        #expect(lag.status == 0, "\(lag.error)")
        #expect(lag.output == "listener:crm|5|25\nuploader|20|10\n")

        let pending = try await runProcess(
            sqlite3, [path, "SELECT count(*) FROM pending_events WHERE consumer = 'uploader';"])
        #expect(pending.output == "10\n")

        let price = try await runProcess(
            sqlite3, [path, "SELECT json_extract(parameters, '$.price') FROM events WHERE name = 'purchase' LIMIT 1;"])
        #expect(price.output == "9.99\n")

        let readable = try await runProcess(
            sqlite3, [path, "SELECT recorded FROM events_readable ORDER BY seq LIMIT 1;"])
        // The first event: fewer than a run are finished, so none is deleted yet.
        #expect(readable.output == "2023-11-14 22:13:20.000\n")
    }

    @Test("P3: every query in docs/SCHEMA.md runs against a real database")
    func documentedQueriesRun() async throws {
        let sqlite3 = try #require(Self.sqlite3)
        let schemaDoc = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("docs/SCHEMA.md")
        let text = try String(contentsOf: schemaDoc, encoding: .utf8)
        let queries = text.components(separatedBy: "```sql\n").dropFirst().map { $0.components(separatedBy: "```")[0] }
        #expect(queries.count >= 5)
        let directory = TemporaryDirectory()
        try await writeDatabase(directory)
        for query in queries {
            let result = try await runProcess(sqlite3, ["-bail", directory.databaseURL.path], input: query)
            #expect(result.status == 0 && result.error.isEmpty, "\(query) failed: \(result.error)")
        }
    }
}
