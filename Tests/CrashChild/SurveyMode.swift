import Foundation
import Spool

/// The counts the `--surveys` mode's surveys wait for: survey "exactly N"
/// triggers while exactly N purchases above 50 have been recorded.
let surveyModeCounts = [1, 5, 20, 50, 100, 200, 400, 800]

/// `--surveys`: registers one survey per count in ``surveyModeCounts``, on
/// purchases whose kept `amount` is above 50, then records purchases
/// forever (amounts going round 0–99), each with its marker in the "id"
/// parameter. Prints "READY" once started, "TRIGGER <survey> <marker>" for
/// every trigger and "ACK <marker>" for every 20th purchase once it is
/// durable. The crash tests SIGKILL it at random moments. Neither the log
/// nor the history is bounded: the test checks every kept value against
/// every event, however many the runs record.
func runSurveys(_ url: URL, tag: String) async throws {
    let engine = EventEngine(
        configuration: EngineConfiguration(database: .file(url), maximumRetainedEvents: nil, maximumHistoryRows: nil))
    for count in surveyModeCounts {
        try engine.surveys.register(
            Survey(
                id: "exactly \(count)", triggerEventNames: ["purchase"],
                conditions: .eventFrequency(
                    EventFrequency("purchase", .exactly, count, where: .property("amount", .greaterThan(50)))),
                historyProperties: ["purchase": ["amount"]]))
    }
    engine.surveys.onTrigger { trigger in
        if let marker = trigger.event.parameters["id"]?.stringValue { emit("TRIGGER \(trigger.surveyID) \(marker)") }
    }
    try await engine.start()
    emit("READY")
    var counter = 0
    while true {
        counter += 1
        let parameters: [String: EventValue] = ["id": .string("\(tag)-\(counter)"), "amount": .int(counter * 37 % 100)]
        if counter % 20 == 0 {
            _ = try await engine.recordDurably("purchase", parameters: parameters)
            emit("ACK \(tag)-\(counter)")
        } else {
            try engine.record("purchase", parameters: parameters)
        }
    }
}
