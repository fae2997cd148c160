import Foundation

/// The test collector (Tests/Collector/collector.py, or its lean server) in
/// a child process on 127.0.0.1, with a bounded lifetime; `stop()` kills it.
final class LoopbackCollector {
    let process = Process()
    let port: Int
    let scratch = Scratch("collector")
    var log: URL { scratch.url.appendingPathComponent("collector.jsonl") }

    /// Nil, with a line saying why `purpose` is skipped, when the script is
    /// not under the current directory or the collector does not start.
    /// `lean`: Tests/Collector/lean_collector.py instead, which answers
    /// every request 200 and logs its size and event count only (no
    /// validation, no copy of the body), so the collector's own Python
    /// costs least; with `delay`, it waits that many seconds before each
    /// answer (a round trip).
    init?(purpose: String, lifetime: Int = 120, lean: Bool = false, delay: TimeInterval = 0) {
        let script = lean ? "Tests/Collector/lean_collector.py" : "Tests/Collector/collector.py"
        guard FileManager.default.fileExists(atPath: script) else {
            print("skipping \(purpose): run spool-bench from the package root (needs \(script))")
            return nil
        }
        _ = FileManager.default.createFile(
            atPath: scratch.url.appendingPathComponent("collector.jsonl").path, contents: nil)
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [
            "python3", script, "--log", scratch.url.appendingPathComponent("collector.jsonl").path, "--lifetime",
            "\(lifetime)", "--delay", "\(delay)",
        ]
        let pipe = Pipe()
        process.standardOutput = pipe
        do { try process.run() } catch {
            print("skipping \(purpose): the collector did not start (\(error))")
            return nil
        }
        let line = String(decoding: pipe.fileHandleForReading.availableData, as: UTF8.self)
        guard
            let port = line.split(separator: " ").last.flatMap({
                Int($0.trimmingCharacters(in: .whitespacesAndNewlines))
            })
        else {
            print("skipping \(purpose): the collector did not start (\(line))")
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            return nil
        }
        self.port = port
    }

    var url: URL { URL(string: "http://127.0.0.1:\(port)/collect")! }

    /// The events a lean collector counted in what it received, once every
    /// request was answered (each line of its log is whole).
    func countedEvents() throws -> Int {
        try String(contentsOf: log, encoding: .utf8).split(separator: "\n").reduce(0) { total, line in
            let entry = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            return total + (entry?["events"] as? Int ?? 0)
        }
    }

    /// SIGKILL: a child can inherit a blocked SIGTERM from this process.
    func stop() {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}
