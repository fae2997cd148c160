import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// Identity changes racing each other (I7): across two engines on one file,
/// as an app and its extension, and across threads of one engine.
struct IdentityRaceTests {
    @Test(
        "I7: a change made after another engine's reset is made over it: the next user never gets the signed-out one's anonymous id"
    )
    func changeAfterAResetElsewhere() async throws {
        let directory = TemporaryDirectory()
        let app = try await startedEngine(directory)
        let widget = try await startedEngine(directory)
        try app.identify(userId: "alice", traits: ["plan": "pro"])
        let alice = try await app.identity()
        _ = try await widget.recordDurably("seen_by_the_widget")  // the widget takes alice on
        app.reset()  // alice signs out on the shared device
        let signedOut = try await app.identity()
        try widget.identify(userId: "bob")
        let bob = try await widget.identity()
        #expect(signedOut.anonymousId != alice.anonymousId)
        #expect(bob.userId == "bob" && bob.anonymousId == signedOut.anonymousId, "bob is made over the reset")
        await app.close()
        await widget.close()

        let relaunched = try await startedEngine(directory)
        #expect(try await relaunched.identity() == bob)
        await relaunched.close()
    }

    @Test("I7: identify, reset and alias from several threads: each identify message carries the user it named")
    func identifyMessagesKeepTheirUser() async throws {
        let directory = TemporaryDirectory()
        let engine = try await startedEngine(directory)
        let group = DispatchGroup()
        for thread in 0..<3 {
            group.enter()
            Thread {
                defer { group.leave() }
                for index in 0..<300 {
                    let user = "t\(thread)-\(index)"
                    do {
                        if thread < 2 {
                            try engine.identify(userId: user, traits: ["who": .string(user)])
                        } else if index % 4 == 0 {
                            engine.reset()
                        } else {
                            try engine.alias("alias-\(user)")
                        }
                    } catch {
                        Issue.record("\(error)")
                    }
                }
            }.start()
        }
        await onOwnThread { group.wait() }
        try await engine.settle()
        let messages = try await engine.query { connection -> [(user: String?, who: String?)] in
            var found: [(String?, String?)] = []
            try connection.withStatement(
                """
                SELECT i.user_id, json_extract(e.parameters, '$.who') FROM events AS e \
                JOIN identities AS i ON i.id = e.identity_id WHERE e.type = 'identify' ORDER BY e.seq
                """
            ) { statement in
                while try statement.step() {
                    found.append((statement.optionalString(at: 0), statement.optionalString(at: 1)))
                }
            }
            return found
        }
        #expect(messages.count == 600)
        let wrong = messages.filter { $0.user != $0.who }
        #expect(wrong.isEmpty, "\(wrong.count) identify messages carry another identity: \(wrong.prefix(3))")
        await engine.close()
    }
}
