import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Identity that holds in every order of calls (I7–I9): changes in the
/// order they were made, adoption of another process's change that never
/// flips back, and row ids an erasure never gives to another person. Each
/// test drives the public API in real child processes (Tests/CrashChild,
/// IdentityModes.swift) and reads the file they wrote from this one.
@Suite(.needsChildProcesses)
struct IdentityOrderTests {
    /// One event as the child's model expects it.
    struct Expected: Equatable {
        var user: String?
        var epoch: Int
        var traits: Int?
        var context: Int?
    }

    /// The events of one file as stored, but the `session_start` each
    /// launch records: id, user, anonymous id, traits' tag, context's tag, in
    /// log order.
    static func storedEvents(_ connection: Connection) throws -> [(
        id: String, name: String, user: String?, anonymous: String?, traits: Int?, context: Int?
    )] {
        try connection.withStatement(
            """
            SELECT e.id, e.name, i.user_id, i.anonymous_id, json_extract(i.traits, '$.t'), json_extract(c.context, '$.c') \
            FROM events AS e LEFT JOIN identities AS i ON i.id = e.identity_id \
            LEFT JOIN contexts AS c ON c.id = e.context_id WHERE e.name != 'session_start' ORDER BY e.seq
            """
        ) { statement in
            var rows: [(id: String, name: String, user: String?, anonymous: String?, traits: Int?, context: Int?)] = []
            while try statement.step() {
                rows.append(
                    (
                        statement.string(at: 0), statement.string(at: 1), statement.optionalString(at: 2),
                        statement.optionalString(at: 3), statement.optionalInt64(at: 4).map(Int.init),
                        statement.optionalInt64(at: 5).map(Int.init)
                    ))
            }
            return rows
        }
    }

    @Test(
        "I7: 1,000 random interleavings of identify, reset, alias, setContext, record, commits and restarts: every event keeps the identity the model gives it, and a restart in another process restores the last change"
    )
    func randomInterleavings() async throws {
        let directory = TemporaryDirectory()
        let (children, perChild) = (4, 250)
        var outputs: [[String]] = []
        // Two at a time: one per core.
        for pair in stride(from: 0, to: children, by: 2) {
            let running = try (pair..<pair + 2).map { index in
                let folder = directory.file("child\(index)")
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
                return try ProcessBoundaryTests.Child(
                    [folder.path, "i\(index)", "--interleavings", "\(7_919 * (index + 1))", "\(perChild)"],
                    in: directory, name: "interleavings\(index)")
            }
            for child in running { outputs.append(await child.finish(timeout: 300)) }
        }
        var checkedEvents = 0
        for (index, lines) in outputs.enumerated() {
            #expect(lines.last == "DONE", "child \(index) finished: \(lines.suffix(2))")
            let bad = lines.filter { $0.hasPrefix("BAD ") }
            #expect(bad.isEmpty, "child \(index), identity() after a restart: \(bad.prefix(5))")
            // By event id, or by `name:<name>` for an event held until start().
            var expected: [Int: [String: Expected]] = [:]
            var uncheckable: [Int: Int] = [:]
            var now: [Int: Expected] = [:]
            for line in lines {
                let fields = line.split(separator: " ").map(String.init)
                func value(_ field: String) -> String? { field == "-" ? nil : field }
                if fields.first == "EV", fields.count == 7, let file = Int(fields[1]), fields[2] == "queued" {
                    uncheckable[file, default: 0] += 1
                } else if fields.first == "EV", fields.count == 7, let file = Int(fields[1]),
                    let epoch = Int(fields[4])
                {
                    expected[file, default: [:]][fields[2]] = Expected(
                        user: value(fields[3]), epoch: epoch, traits: value(fields[5]).flatMap { Int($0) },
                        context: value(fields[6]).flatMap { Int($0) })
                } else if fields.first == "NOW", fields.count == 5, let file = Int(fields[1]),
                    let epoch = Int(fields[3])
                {
                    now[file] = Expected(
                        user: value(fields[2]), epoch: epoch, traits: value(fields[4]).flatMap { Int($0) },
                        context: nil)
                }
            }
            #expect(now.count == perChild, "child \(index) ran every interleaving")
            for file in 0..<perChild {
                guard let last = now[file] else { continue }
                let url = directory.file("child\(index)/\(file).sqlite")
                // The restart that counts: another process opens the file.
                let engine = EventEngine(configuration: EngineConfiguration(database: .file(url)))
                try await engine.start()
                let identity = try await engine.identity()
                let stored = try await engine.query { try Self.storedEvents($0) }
                await engine.close()
                let failure = "child \(index) interleaving \(file)"
                #expect(identity.userId == last.user, "\(failure): the restart restores the last change")
                #expect(identity.traits["t"]?.intValue == last.traits, "\(failure): traits")
                // One anonymous id per epoch, a new one for each.
                var anonymousIDs: [Int: String] = [:]
                if let anonymous = stored.last.flatMap({ _ in identity.anonymousId }) {
                    anonymousIDs[last.epoch] = anonymous
                }
                let events = expected[file] ?? [:]
                #expect(
                    stored.count == events.count + uncheckable[file, default: 0],
                    "\(failure): every accepted event stored")
                for event in stored {
                    guard let want = events[event.id] ?? events["name:\(event.name)"] else {
                        if event.name == "identify" || event.name == "alias" { continue }
                        Issue.record("\(failure): an event the child did not accept: \(event.id)")
                        continue
                    }
                    let got = Expected(
                        user: event.user, epoch: want.epoch, traits: event.traits, context: event.context)
                    #expect(got == want, "\(failure), event \(event.id)")
                    if let anonymous = event.anonymous {
                        let known = anonymousIDs[want.epoch] ?? anonymous
                        #expect(known == anonymous, "\(failure): one anonymous id in epoch \(want.epoch)")
                        anonymousIDs[want.epoch] = anonymous
                    } else {
                        Issue.record("\(failure): event \(event.id) has no identity")
                    }
                    checkedEvents += 1
                }
                #expect(Set(anonymousIDs.values).count == anonymousIDs.count, "\(failure): reset() makes a new id")
            }
        }
        print("identity interleavings: \(children * perChild) files, \(checkedEvents) events checked")
        #expect(checkedEvents > 5_000)
    }

    @Test(
        "I8: another process's identity change, once in the file, applies to every event this process records after it, and never flips back (100 rounds)"
    )
    func adoptionIsMonotonic() async throws {
        let directory = TemporaryDirectory()
        let control = directory.file("control")
        try FileManager.default.createDirectory(at: control, withIntermediateDirectories: true)
        let (rounds, perRound) = (100, 200)
        let engine = try await startedEngine(directory) { $0.maximumRetainedEvents = nil }
        let child = try ProcessBoundaryTests.Child(
            [directory.databaseURL.path, "rounds", "--rounds", control.path, "\(rounds)", "\(perRound)"],
            in: directory, name: "rounds")
        try #require(try await waitUntil(timeout: 60, interval: 0.002) { child.lines().contains("READY") })
        for round in 1...rounds {
            try engine.identify(userId: "user-\(round)")
            // The change is in the file once identity() returns.
            #expect(try await engine.identity().userId == "user-\(round)")
            _ = FileManager.default.createFile(
                atPath: control.appendingPathComponent("round-\(round)").path, contents: nil)
            try #require(
                try await waitUntil(timeout: 60, interval: 0.001) { child.lines().contains("ROUND \(round)") },
                "\(child.lines().suffix(3))")
        }
        let output = await child.finish(timeout: 60)
        #expect(output.last == "CLOSED", "\(output.suffix(3))")
        let stored = try await engine.query { connection in
            try connection.withStatement(
                """
                SELECT json_extract(e.parameters, '$.round'), i.user_id FROM events AS e \
                LEFT JOIN identities AS i ON i.id = e.identity_id WHERE e.name = 'round' ORDER BY e.seq
                """
            ) { statement in
                var rows: [(round: Int, user: String?)] = []
                while try statement.step() {
                    rows.append((Int(statement.int64(at: 0)), statement.optionalString(at: 1)))
                }
                return rows
            }
        }
        await engine.close()
        #expect(stored.count == rounds * perRound)
        var wrongRounds: [Int: [String]] = [:]
        var flips = 0
        var previous = 0
        for row in stored {
            if row.user != "user-\(row.round)" {
                wrongRounds[row.round, default: []].append(row.user ?? "-")
            }
            let index = row.user.flatMap { Int($0.dropFirst("user-".count)) } ?? 0
            if index < previous { flips += 1 }
            previous = max(previous, index)
        }
        let summary = wrongRounds.keys.sorted().prefix(5).map { "round \($0): \(Set(wrongRounds[$0]!))" }
        #expect(wrongRounds.isEmpty, "\(wrongRounds.count) of \(rounds) rounds carry another user: \(summary)")
        #expect(flips == 0, "events that went back to an older identity: \(flips)")
    }
    @Test(
        "I9: an erasure in one process while another records: no event points at a row of another person or at no row, and the other process drops its cached rows"
    )
    func erasureWhileAnotherProcessRecords() async throws {
        let directory = TemporaryDirectory()
        let control = directory.file("control")
        try FileManager.default.createDirectory(at: control, withIntermediateDirectories: true)
        let engine = try await startedEngine(directory) { $0.maximumRetainedEvents = nil }
        let child = try ProcessBoundaryTests.Child(
            [directory.databaseURL.path, "p1", "--erasure-recorder", control.path], in: directory, name: "recorder")
        func recorded() -> Int { child.lines().filter { $0.hasPrefix("RECORDED ") }.count }
        try #require(
            try await waitUntil(timeout: 60, interval: 0.002) { recorded() >= 1 }, "\(child.lines().suffix(3))")
        for round in 1...3 {
            let seen = recorded()
            try #require(try await waitUntil(timeout: 60, interval: 0.001) { recorded() > seen }, "round \(round)")
            // The WAL cannot be truncated while the recorder reads: the rows
            // are deleted all the same, and a second call finishes.
            let erased = try await waitUntil(timeout: 30, interval: 0.01) {
                do {
                    try await engine.eraseAllData()
                    return true
                } catch SpoolError.sqlite(let failure) where failure.resultCode == .busy {
                    return false
                }
            }
            try #require(erased, "round \(round)")
            for index in 1...5 { try engine.identify(userId: "Z\(round)-\(index)") }
            _ = try await engine.identity()
        }
        let seen = recorded()
        try #require(
            try await waitUntil(timeout: 60, interval: 0.001) { recorded() > seen + 1 }, "after the last erasure")
        _ = FileManager.default.createFile(atPath: control.appendingPathComponent("stop").path, contents: nil)
        let output = await child.finish(timeout: 60)
        #expect(output.last == "DONE", "\(output.suffix(3))")
        #expect(output.contains("IDENTITY Z3-5"), "the recorder adopted the identity after the last erasure")

        let (dangling, wrong, recorderEvents) = try await engine.query { connection in
            let dangling = try connection.scalarInt(
                """
                SELECT count(*) FROM events WHERE identity_id IS NULL \
                OR identity_id NOT IN (SELECT id FROM identities) \
                OR (context_id IS NOT NULL AND context_id NOT IN (SELECT id FROM contexts))
                """)
            // An identity with a user was made before the event was recorded
            // (a later change is another person's); the anonymous row the
            // erasure left is the only one an earlier event may take.
            let wrong = try connection.withStatement(
                """
                SELECT e.name, json_extract(e.parameters, '$.n'), i.user_id FROM events AS e \
                JOIN identities AS i ON i.id = e.identity_id \
                WHERE i.user_id LIKE 'W%' OR (i.user_id IS NOT NULL AND i.created_at > e.recorded_at) \
                OR (i.user_id IS NULL AND i.id != (SELECT min(id) FROM identities)) LIMIT 5
                """
            ) { statement in
                var rows: [String] = []
                while try statement.step() {
                    rows.append(
                        "\(statement.string(at: 0)) \(statement.int64(at: 1)) \(statement.optionalString(at: 2) ?? "-")"
                    )
                }
                return rows
            }
            return (dangling, wrong, try connection.scalarInt("SELECT count(*) FROM events WHERE name = 'p1'"))
        }
        await engine.close()
        #expect(recorderEvents > 0, "the recorder committed events after the last erasure")
        #expect(dangling == 0, "events pointing at no row")
        #expect(wrong.isEmpty, "events pointing at another person's row: \(wrong)")
    }
}

extension Statement {
    func optionalInt64(at index: Int32) -> Int64? { isNull(at: index) ? nil : int64(at: index) }
}
