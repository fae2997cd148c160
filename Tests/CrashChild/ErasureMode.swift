import Foundation
import Spool
import SpoolStorage

// The erasure mode of spool-crash-child: an erasure killed after its rows
// are deleted and before the file is rebuilt (see main.swift for the
// command line).

/// Records 200 events carrying `marker`, then erases while a read
/// transaction of its own holds the WAL, so that the erasure waits in its
/// rebuild (for the busy timeout) once its transaction has committed.
/// When another connection sees the erasure counted, it prints "COMMITTED"
/// and sends itself SIGKILL: the kill lands inside the rebuild however
/// slowly the machine runs the test that waits for it.
func runKilledErasure(_ url: URL, marker: String) async throws {
    let engine = EventEngine(configuration: EngineConfiguration(database: .file(url)))
    try await engine.start()
    for index in 0..<200 {
        try engine.record(marker, parameters: ["email": .string("\(marker)-\(index)@example.com")])
    }
    _ = try await engine.recordDurably(marker)
    let options = ConnectionOptions(busyTimeoutMilliseconds: 0)
    let reader = try Connection(path: url.path, options: options)
    try reader.execute("BEGIN")
    let before = try reader.scalarInt("SELECT erasures FROM log_head WHERE id = 1")
    Thread {
        // try?: a connection that will not open, or a busy read, is looked at again.
        guard let watcher = try? Connection(path: url.path, options: options) else { return emit("NO WATCHER") }
        for _ in 0..<10_000 {
            let erasures = (try? watcher.scalarInt("SELECT erasures FROM log_head WHERE id = 1")) ?? before
            if erasures > before {
                emit("COMMITTED")
                kill(getpid(), SIGKILL)
            }
            usleep(1_000)
        }
    }.start()
    try await engine.eraseAllData()
    // Used after the erasure, so the reader (and its read transaction) is
    // not released while the erasure waits for it.
    try reader.execute("COMMIT")
    emit("NOT KILLED")
}
