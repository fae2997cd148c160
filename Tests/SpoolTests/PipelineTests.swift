import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Middleware before persist (I5) and message types (I6), through the
/// public API.
struct PipelineTests {
    /// The custom events in the file, in log order: name and parameters as
    /// stored.
    static func stored(_ engine: EventEngine) async throws -> [(name: String, type: String, parameters: String)] {
        try await engine.query { connection in
            try connection.readEvents(after: 0, limit: 1_000, now: 0)
                .filter { $0.name != EventEngine.sessionStartEventName }
                .map { ($0.name, $0.type, $0.parametersJSON) }
        }
    }

    @Test("I5: middleware runs in the order added; each sees the one before's changes, and can rename")
    func order() async throws {
        let engine = try await startedEngine()
        let seen = Protected<[String]>([])
        engine.addMiddleware { event in
            seen.withLock { $0.append("first:\(event.name)") }
            event.parameters["app_version"] = "3.1"
            return .keep
        }
        engine.addMiddleware { event in
            seen.withLock { $0.append("second:\(event.parameters["app_version"]?.stringValue ?? "-")") }
            event.name = "renamed_" + event.name
            return .keep
        }
        let outcome = try engine.record("purchase", parameters: ["amount": 9.5])
        #expect(outcome.isAccepted)
        try await engine.settle()
        #expect(seen.withLock { $0 } == ["first:purchase", "second:3.1"])
        let rows = try await Self.stored(engine)
        #expect(rows.map(\.name) == ["renamed_purchase"])
        #expect(rows.first?.parameters == #"{"amount":9.5,"app_version":"3.1"}"#)
        await engine.close()
    }

    @Test("I5: a drop returns its own outcome, is counted in diagnostics, and stops the middleware after it")
    func drop() async throws {
        let engine = try await startedEngine()
        let later = Protected(0)
        engine.addMiddleware { event in
            event.name.hasPrefix("debug_") ? .drop(reason: "sampled out") : .keep
        }
        engine.addMiddleware { _ in
            later.withLock { $0 += 1 }
            return .keep
        }
        #expect(try engine.record("debug_tap") == .droppedByMiddleware(reason: "sampled out"))
        #expect(try engine.record("kept").isAccepted)
        try await engine.settle()
        #expect(later.withLock { $0 } == 1, "the dropped event went no further")
        #expect(try await Self.stored(engine).map(\.name) == ["kept"])
        #expect(engine.diagnosticCounts.occurrences[.eventDroppedByMiddleware] == 1)
        #expect(engine.diagnosticCounts.events[.eventDroppedByMiddleware] == 1)
        // Counted above with nobody listening; a stream opened now hears
        // the next drop, message and all.
        let heard = Protected<[SpoolDiagnostic]>([])
        let stream = engine.diagnostics()
        let reader = Task { for await diagnostic in stream { heard.withLock { $0.append(diagnostic) } } }
        #expect(try engine.record("debug_swipe") == .droppedByMiddleware(reason: "sampled out"))
        #expect(try await waitUntil { !heard.withLock(\.isEmpty) }, "a stream opened later heard nothing")
        #expect(heard.withLock { $0.map(\.message) } == ["debug_swipe: sampled out"])
        #expect(engine.diagnosticCounts.occurrences[.eventDroppedByMiddleware] == 2)
        await engine.close()
        reader.cancel()
    }

    struct ScrubberFailed: Error {}

    @Test("I5: a middleware that throws drops the event: never stored unscrubbed, reported with the error")
    func throwingScrubber() async throws {
        let engine = try await startedEngine()
        let diagnostics = Protected<[SpoolDiagnostic]>([])
        let stream = engine.diagnostics()
        let reader = Task { for await diagnostic in stream { diagnostics.withLock { $0.append(diagnostic) } } }
        engine.addMiddleware { event in
            guard event.parameters["email"] == nil else { throw ScrubberFailed() }
            return .keep
        }
        let outcome = try engine.record("signup", parameters: ["email": "someone@example.com"])
        guard case .droppedByMiddleware(let reason) = outcome else {
            Issue.record("expected a drop, got \(outcome)")
            return
        }
        #expect(reason.contains("threw"))
        #expect(try engine.record("signup", parameters: ["plan": "free"]).isAccepted, "the next event goes on")
        try await engine.settle()
        let rows = try await Self.stored(engine)
        #expect(rows.map(\.parameters) == [#"{"plan":"free"}"#])
        #expect(try await waitUntil { diagnostics.withLock { $0 }.contains { $0.kind == .middlewareFailed } })
        let failure = try #require(diagnostics.withLock { $0 }.first { $0.kind == .middlewareFailed })
        #expect(failure.error is ScrubberFailed && failure.eventCount == 1)
        reader.cancel()
        await engine.close()
    }

    @Test("I5: priority events pass the middleware; session_start does not; a renamed event is validated")
    func priorityAndValidation() async throws {
        let engine = try await startedEngine { $0.priorityEventNames = ["crash"] }
        engine.addMiddleware { event in
            event.parameters["stamped"] = true
            if event.name == "rename_me" { event.name = "" }
            return .keep
        }
        try engine.record("crash")
        #expect(throws: SpoolError.self, "an empty name is invalid whoever set it") { try engine.record("rename_me") }
        try await engine.settle()
        let all = try await engine.query {
            try $0.readEvents(after: 0, limit: 10, now: 0).map { ($0.name, $0.parametersJSON) }
        }
        #expect(all.map(\.0) == [EventEngine.sessionStartEventName, "crash"])
        #expect(all.last?.1 == #"{"stamped":true}"#)
        #expect(all.first?.1 == "{}")
        await engine.close()
    }

    @Test("I5: middleware added and removed while threads record: no crash, each event passes a snapshot")
    func addAndRemoveWhileRecording() async throws {
        let engine = try await startedEngine()
        let recorded = Protected(0)
        let threads = (0..<2).map { index in
            Thread {
                for event in 0..<2_000 {
                    // try?: a refused record only shortens the load; what is checked is below.
                    if (try? engine.record("load_\(index)", parameters: ["i": .int(event)]))?.isAccepted == true {
                        recorded.withLock { $0 += 1 }
                    }
                }
            }
        }
        for thread in threads { thread.start() }
        var registrations: [Registration] = []
        for round in 0..<200 {
            registrations.append(
                engine.addMiddleware { event in
                    event.parameters["m\(round % 4)"] = true
                    return .keep
                })
            if registrations.count > 3 { registrations.removeFirst().cancel() }
        }
        #expect(try await waitUntil(timeout: 60) { threads.allSatisfy(\.isFinished) })
        try await engine.settle()
        let count = try await engine.query { try $0.scalarInt("SELECT count(*) FROM events WHERE name LIKE 'load_%'") }
        #expect(count == recorded.withLock { $0 } && count == 4_000)
        await engine.close()
    }

    @Test("I6: message types: screen, identify, group and alias are stored with their type, target and traits")
    func messageTypes() async throws {
        let engine = try await startedEngine()
        let listener = CollectingEvents()
        engine.on(.everyEvent) { listener.append($0) }
        try engine.screen("Checkout", properties: ["step": 2])
        try engine.identify(userId: "u-1", traits: ["plan": "pro"])
        try engine.group("acme", traits: ["seats": 12])
        try engine.alias("u-2")
        try engine.record("tapped")
        try await engine.settle()
        let rows = try await engine.query { connection in
            try connection.readEvents(after: 0, limit: 10, now: 0).dropFirst().map {
                ($0.type, $0.name, $0.target, $0.identity?.userID, $0.parametersJSON)
            }
        }
        #expect(rows.map(\.0) == ["screen", "identify", "group", "alias", "track"])
        #expect(rows[0].1 == "Checkout" && rows[0].4 == #"{"step":2}"#)
        #expect(rows[1].3 == "u-1" && rows[1].4 == #"{"plan":"pro"}"#)
        #expect(rows[2].2 == "acme" && rows[2].4 == #"{"seats":12}"#)
        #expect(rows[3].2 == "u-1" && rows[3].3 == "u-2", "alias: previous id u-1, the user now u-2")
        #expect(rows[4].3 == "u-2")
        #expect(try await engine.identity().traits == ["plan": "pro"], "alias keeps the traits")
        let delivered = listener.events.withLock { $0 }.map { ($0.type, $0.target) }
        #expect(delivered.map(\.0) == [.screen, .identify, .group, .alias, .track])
        #expect(delivered[2].1 == "acme")
        // Only track events enter the survey history.
        let history = try await engine.query { try $0.scalarString("SELECT group_concat(name) FROM event_history") }
        #expect(history == "session_start,tapped")
        await engine.close()
    }

    @Test(
        "I11: identify's traits pass the middleware once: the identity keeps what it leaves, and a dropped or failed identify keeps no traits"
    )
    func traitsPassTheMiddleware() async throws {
        let directory = TemporaryDirectory()
        let marker = "TRAITSCRUBMARKER7"
        let database = directory.databaseURL
        func found() -> Int { PrivacyTests.occurrences(of: marker, besides: database).values.reduce(0, +) }
        let engine = try await startedEngine(directory)
        let calls = Protected(0)
        engine.addMiddleware { event in
            guard event.type == .identify else { return .keep }
            calls.withLock { $0 += 1 }
            event.parameters["email"] = nil
            if event.parameters["fail"] != nil { throw ScrubFailed() }
            return event.parameters["drop"] != nil ? .drop(reason: "no identify today") : .keep
        }
        try engine.identify(userId: "u-1", traits: ["email": .string("\(marker)@example.com"), "plan": "pro"])
        #expect(calls.withLock { $0 } == 1, "once, for the identity and the message")
        #expect(try await engine.identity().traits == ["plan": "pro"])
        try await engine.settle()
        let identify = try await Self.stored(engine).filter { $0.type == "identify" }
        #expect(identify.map(\.parameters) == [#"{"plan":"pro"}"#])
        await engine.close()
        #expect(found() == 0, "the scrubbed trait reached the file")

        let again = try await startedEngine(directory)
        again.addMiddleware { event in
            event.parameters["secret"] = nil
            if event.parameters["fail"] != nil { throw ScrubFailed() }
            return event.parameters["drop"] != nil ? .drop(reason: "no identify today") : .keep
        }
        for key in ["drop", "fail"] {
            let outcome = try again.identify(userId: "u-\(key)", traits: [key: true, "plan": "team"])
            guard case .droppedByMiddleware = outcome else {
                Issue.record("\(key): \(outcome)")
                continue
            }
            let identity = try await again.identity()
            #expect(identity.userId == "u-\(key)", "the user id changes")
            #expect(identity.traits.isEmpty, "\(key): no traits kept")
        }
        await again.close()
    }
}

/// What a scrubber throws when it cannot scrub.
private struct ScrubFailed: Error {}
