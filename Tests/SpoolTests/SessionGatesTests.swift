import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// L2, L3 and L12 (docs/BEHAVIOUR.md) as rules on a value: the gates and the
/// session, without a database or an engine.
struct SessionGatesTests {
    static func entry(_ name: String) -> SessionGates.Waiting {
        SessionGates.Waiting(record: EventRecord(name: name, parametersJSON: "{}", recordedAt: 1), settle: nil)
    }

    @Test("L3: disabled, then opted out, drop an event before any other gate")
    func disabledAndOptedOutDropFirst() {
        var gates = SessionGates(consent: true, enabled: false, sessionEventLimit: 0, waitingLimit: 10)
        #expect(gates.decide(priority: false, hasLog: true) == .drop(.droppedDisabled))
        gates.enabled = true
        gates.consent = false
        #expect(gates.decide(priority: true, hasLog: true) == .drop(.droppedOptedOut))
    }

    @Test("L2: without a session or a log an event waits; once a session starts it is appended in it")
    func eventsWaitForASession() {
        var gates = SessionGates(consent: true, enabled: true, sessionEventLimit: nil, waitingLimit: 10)
        #expect(gates.decide(priority: false, hasLog: true) == .wait, "no session yet")
        _ = gates.wait(Self.entry("early"), priority: false)
        let started = gates.startSession("s1")
        #expect(started.map(\.record.name) == ["early"])
        #expect(started.map(\.record.sessionID) == ["s1"])
        #expect(gates.waiting.isEmpty)
        #expect(gates.decide(priority: false, hasLog: false) == .wait, "no log yet")
        #expect(gates.decide(priority: false, hasLog: true) == .append(sessionID: "s1"))
        gates.endSession()
        #expect(gates.decide(priority: false, hasLog: true) == .wait)
    }

    @Test("L2: the waiting queue is bounded; the oldest gives way and is counted")
    func theWaitingQueueIsBounded() {
        var gates = SessionGates(consent: true, enabled: true, sessionEventLimit: nil, waitingLimit: 2)
        let displaced = ["a", "b", "c", "d"].map { gates.wait(Self.entry($0), priority: false)?.record.name }
        #expect(displaced == [nil, nil, "a", "b"])
        #expect(gates.waiting.map(\.record.name) == ["c", "d"])
        #expect(gates.waitingDropped == 2)
    }

    @Test("L12: the session limit counts what was accepted, waiting or appended; priority events bypass it")
    func theSessionLimit() {
        var gates = SessionGates(consent: true, enabled: true, sessionEventLimit: 2, waitingLimit: 10)
        _ = gates.wait(Self.entry("early"), priority: false)  // counts toward the upcoming session
        _ = gates.startSession("s1")
        gates.count(priority: false)
        #expect(gates.decide(priority: false, hasLog: true) == .drop(.droppedSessionLimit))
        #expect(gates.decide(priority: true, hasLog: true) == .append(sessionID: "s1"))
        gates.count(priority: true)
        #expect(gates.sessionCount == 2)
        // A new session starts the count over; ending one does too.
        _ = gates.startSession("s2")
        #expect(gates.decide(priority: false, hasLog: true) == .append(sessionID: "s2"))
        gates.count(priority: false)
        gates.endSession()
        #expect(gates.sessionCount == 0)
    }
}
