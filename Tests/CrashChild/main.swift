// spool-crash-child DATABASE_PATH RUN_TAG [--engine]
//
// Appends events forever and prints "ACK <id>" for each once its commit is
// acknowledged. The crash tests SIGKILL this process at random moments and
// check that every acknowledged event is in the database exactly once and in
// order.
//
// With --engine it goes through EventEngine.recordDurably instead, with a
// durable listener "crash" that prints "GOT <id>" for each event it finishes;
// each event carries its own marker in the "id" parameter.
import Foundation
import Spool
import SpoolStorage

/// Writes straight to the file descriptor: nothing sits in a buffer at SIGKILL.
func emit(_ text: String) {
    FileHandle.standardOutput.write(Data((text + "\n").utf8))
}

final class Printer: EventListener {
    func onEventRecorded(_ name: String, parameters: [String: EventValue], timestamp: TimeInterval) {
        if let id = parameters["id"]?.stringValue { emit("GOT \(id)") }
    }
}

let arguments = CommandLine.arguments
guard arguments.count >= 3 else {
    FileHandle.standardError.write(Data("usage: spool-crash-child DATABASE_PATH RUN_TAG [--engine]\n".utf8))
    exit(2)
}
let url = URL(fileURLWithPath: arguments[1])
let tag = arguments[2]

if arguments.contains("--engine") {
    let engine = EventEngine(configuration: EngineConfiguration(database: .file(url), maximumRetainedEvents: nil))
    let printer = Printer()
    engine.events.addDurableObserver(printer, id: "crash")
    try await engine.start()
    emit("READY")
    var counter = 0
    while true {
        counter += 1
        let marker = "\(tag)-\(counter)"
        _ = try await engine.recordDurably("crash_event", parameters: ["id": .string(marker), "n": .int(counter)])
        emit("ACK \(marker)")
    }
}

let database = try DatabaseQueue(path: url.path)
let log = EventLog(database: database)
emit("READY")

var counter = 0
while true {
    var receipts: [AppendReceipt] = []
    for _ in 0..<25 {
        counter += 1
        receipts.append(
            try log.append(
                EventRecord(
                    name: "crash_\(tag)", parametersJSON: #"{"i":\#(counter),"tag":"\#(tag)"}"#,
                    recordedAt: Date().timeIntervalSince1970, addsToHistory: counter % 2 == 0)))
    }
    try await log.waitUntilDurable(receipts[receipts.count - 1])
    // One write per group keeps the acknowledgements cheap and atomic per line.
    emit(receipts.map { "ACK \($0.id)" }.joined(separator: "\n"))
}
