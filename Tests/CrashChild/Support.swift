import Foundation
import Spool

/// Most modes loop until the test's SIGKILL. When the test process itself
/// is gone (a crashed test run), that never comes, so the child ends by
/// itself once its parent changes, checking twice a second.
func endWhenOrphaned() {
    let parent = getppid()
    Thread.detachNewThread {
        while getppid() == parent { Thread.sleep(forTimeInterval: 0.5) }
        exit(3)
    }
}

/// Writes straight to the file descriptor: nothing sits in a buffer at SIGKILL.
func emit(_ text: String) {
    FileHandle.standardOutput.write(Data((text + "\n").utf8))
}

/// Polls `condition` every 10 ms for at most `seconds` (the child's copy of
/// the tests' bounded `waitUntil`) and returns whether it held for `steady`
/// seconds in a row, so that a state the engine leaves again at once (a
/// short background window) is not reported as reached.
@discardableResult
func poll(seconds: Double, steady: Double = 0, _ condition: @Sendable () -> Bool) async throws -> Bool {
    let needed = Int(steady * 100) + 1
    var held = 0
    for _ in 0..<Int(seconds * 100) {
        held = condition() ? held + 1 : 0
        if held >= needed { return true }
        try await Task.sleep(nanoseconds: 10_000_000)
    }
    return false
}

/// Sleeps until `startAt` (seconds since 1970), so that the workers of one
/// test open the file at the same moment.
func waitForStartTime(_ startAt: Double) async throws {
    let wait = startAt - Date().timeIntervalSince1970
    if wait > 0 { try await Task.sleep(nanoseconds: UInt64(wait * 1e9)) }
}

/// The `--sealed` mode's key: the tests open its files with the same one.
struct ChildKey: EncryptionKeyProvider {
    func currentKey() throws -> EncryptionKey {
        try EncryptionKey(id: "child", bytes: [UInt8](repeating: 0x5A, count: 32))
    }
    func key(withID id: String) throws -> EncryptionKey? { id == "child" ? try currentKey() : nil }
}

final class Printer: EventListener {
    func onEventRecorded(_ event: RecordedEvent) {
        if let id = event.parameters["id"]?.stringValue { emit("GOT \(id)") }
    }
}
