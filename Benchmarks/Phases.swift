import Foundation

// Phases run in a fresh child process (this executable with `--phase`), so
// their memory measurements start clean. A child prints its rows as
// `ROW <json>`, plot points as `SERIES <json>` and bare values as
// `VALUE <key> <number>`.

extension Report {
    /// Runs `phase` in a fresh child process and adds the rows it reports.
    func runIsolated(_ phase: String, quick: Bool) throws {
        _ = try runIsolatedValues(phase, quick ? ["--quick"] : [])
    }

    /// Runs a phase in a fresh process with `arguments` and returns the
    /// values it printed as `VALUE <key> <number>` (rows and series it
    /// printed are added).
    func runIsolatedValues(_ phase: String, _ arguments: [String]) throws -> [String: Double] {
        let output = try runPhase(phase, arguments)
        var values: [String: Double] = [:]
        for line in output.split(separator: "\n") {
            if line.hasPrefix("ROW ") { add(try Row.decoder().decode(Row.self, from: Data(line.dropFirst(4).utf8))) }
            if line.hasPrefix("SERIES ") {
                add(try Row.decoder().decode(Series.self, from: Data(line.dropFirst(7).utf8)))
            }
            let fields = line.split(separator: " ")
            if fields.count == 3, fields[0] == "VALUE", let value = Double(fields[2]) {
                values[String(fields[1])] = value
            }
        }
        // A child's refused appends count as this run's (see `refusalsRow`).
        refusedAndRetried.withLock { $0 += Int(values["refused"] ?? 0) }
        return values
    }

    /// How many appends the writer could not make room for within 2 s, in
    /// this process and its phases: none on a quiet machine.
    func refusalsRow() -> Row {
        Row(
            area: "run", name: "record() and append() calls refused with bufferFull, then retried",
            value: Double(refusedAndRetried.withLock { $0 }), unit: "calls",
            detail: "the writer made no room within 2 s: SpoolError.bufferFull; spool-bench tries such a call again",
            target: 0, comparison: .atMost, othersShare: runStart.othersShare())
    }

    /// Runs this executable with `--phase phase` and `arguments` and returns
    /// its standard output.
    private func runPhase(_ phase: String, _ arguments: [String]) throws -> String {
        #if os(Linux) || os(macOS)
            let process = Process()
            process.executableURL = Self.executable
            process.arguments = ["--phase", phase] + arguments
            let pipe = Pipe()
            process.standardOutput = pipe
            try process.run()
            let output = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            guard process.terminationStatus == 0 else {
                throw NSError(
                    domain: "spool-bench", code: Int(process.terminationStatus),
                    userInfo: [NSLocalizedDescriptionKey: "phase \(phase) failed"])
            }
            return String(decoding: output, as: UTF8.self)
        #else
            throw NSError(
                domain: "spool-bench", code: 1,
                userInfo: [
                    NSLocalizedDescriptionKey: "phase \(phase) needs a child process (Foundation.Process), "
                        + "which this platform lacks"
                ])
        #endif
    }

    /// This executable: `Bundle.main`'s, or `argv[0]` against the current
    /// directory.
    private static var executable: URL {
        let url =
            Bundle.main.executableURL
            ?? URL(
                fileURLWithPath: CommandLine.arguments[0],
                relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true))
        return url.resolvingSymlinksInPath()
    }
}

/// One measured value for the parent process (`Report.runIsolatedValues`).
func emitValue(_ key: String, _ value: Double) {
    print("VALUE \(key) \(value)")
}
