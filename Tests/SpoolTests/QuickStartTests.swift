import Foundation
import Spool
import Testing

/// The README's quick start (`QuickStart.swift`, which scripts/check-readme
/// keeps identical to the README's block), run as a newcomer would run it.
struct QuickStartTests {
    @Test(
        "the README's quick start starts an engine, records, and its flush brings the events to a real collector",
        .needsChildProcesses)
    func quickStartUploads() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let engine = try await startAnalytics(collector: collector.url, directory: directory.url)
        try await checkout(engine)
        await engine.close()

        let events = try collector.requests().filter { $0.status == 200 }.flatMap { request in
            let body = try #require(try JSONSerialization.jsonObject(with: request.rawBody) as? [String: Any])
            return try #require(body["events"] as? [[String: Any]])
        }
        #expect(events.map { $0["name"] as? String } == ["session_start", "purchase"])
        let purchase = try #require(events.last?["parameters"] as? [String: Any])
        #expect(purchase["amount"] as? Double == 9.99 && purchase["currency"] as? String == "EUR")
        #expect(Set(events.compactMap { $0["id"] as? String }).count == 2, "each event carries its own id")
        #expect(
            FileManager.default.fileExists(atPath: directory.defaultDataStoreURL.path),
            "the queue is the file the quick start's comment names")
    }
}
