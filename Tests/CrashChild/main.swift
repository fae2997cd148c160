import Foundation
// spool-crash-child DATABASE_PATH RUN_TAG
//
// Appends events forever, in groups from several concurrent tasks, and prints
// "ACK <id>" for each event once its commit is acknowledged (after awaiting
// durability). The crash tests SIGKILL this process at random moments and check
// that every acknowledged event is in the database exactly once and in order.
@_spi(Internals) import Spool

/// Writes straight to the file descriptor: nothing sits in a buffer at SIGKILL.
func emit(_ text: String) {
    FileHandle.standardOutput.write(Data((text + "\n").utf8))
}

let arguments = CommandLine.arguments
guard arguments.count >= 3 else {
    FileHandle.standardError.write(Data("usage: spool-crash-child DATABASE_PATH RUN_TAG\n".utf8))
    exit(2)
}
let database = try DatabaseQueue(location: .file(URL(fileURLWithPath: arguments[1])))
let log = EventLog(database: database)
let tag = arguments[2]
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
