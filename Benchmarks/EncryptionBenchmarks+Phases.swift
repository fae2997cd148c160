import Foundation
import Spool
import SpoolStorage

extension EncryptionBenchmarks {
    /// The encryption area's parts alone, for a profiler or an A/B of two
    /// builds (`--phase sealing`; docs/BENCH.md lists the variants): `seal`
    /// times a seal and an open of the benchmark's parameters on one
    /// thread, as the writer and the drain run them, the fastest of 20 runs
    /// of 10,000 (µs per call).
    func phase(_ variant: String?, directory: URL?) async throws {
        switch variant ?? "seal" {
        case "seal":
            let (seal, open) = try await sealerCost()
            print("seal", formatNumber(seal), "µs; open", formatNumber(open), "µs")
        case let part:
            let count = quick ? 100_000 : 500_000
            let encrypted = part.hasSuffix("-on")
            if part.hasPrefix("record") {
                let (rate, writer) = try await recordUntilDurable(count: count, encrypted: encrypted)
                print(part, formatNumber(rate), "events/s; writer thread CPU", formatNumber(writer), "µs/event")
            } else if part.hasPrefix("fill"), let directory {
                // A backlog kept in `directory`, for `drain-on|off` to drain
                // in a process of its own.
                let backlog = try await fill(count: count, encrypted: encrypted)
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
                try Self.copyFiles(from: backlog.url, to: directory)
            } else if part.hasPrefix("read"), let directory {
                let (wall, cpu) = try await readCost(directory, count: count, encrypted: encrypted)
                print(part, formatNumber(wall), "µs/event; thread CPU", formatNumber(cpu), "µs/event")
            } else if part.hasPrefix("drain"), let directory {
                let backlog = Scratch("kept-backlog")
                try Self.copyFiles(from: directory, to: backlog.url)
                let user = processCPUTime(userOnly: true)
                let rate = try await drain(backlog, count: count, encrypted: encrypted)
                print(
                    part, formatNumber(rate), "events/s; user CPU",
                    formatNumber((processCPUTime(userOnly: true) - user) / Double(count) * 1e6), "µs/event")
            }
        }
    }

    /// Reads every event of a copy of the backlog in `directory` the way
    /// the drain builds its batches (100 at a time, sealed values opened),
    /// on the engine's own connection, into a checksum: the fastest of 5
    /// passes, wall and thread CPU, in µs per event.
    private func readCost(_ directory: URL, count: Int, encrypted: Bool) async throws -> (Double, Double) {
        let backlog = Scratch("kept-backlog")
        try Self.copyFiles(from: directory, to: backlog.url)
        let stub = UploadFormatBenchmarks.StubTransport()
        let engine = stubbedEngine(on: backlog.database, count: count, encrypted: encrypted, transport: stub)
        try await engine.start()
        guard let database = engine.databaseQueue else { throw SpoolError.notStarted }
        let best = try await database.run { connection -> (UInt64, UInt64) in
            var best = (wall: UInt64.max, cpu: UInt64.max)
            for _ in 0..<5 {
                let (start, cpu) = (now(), EventLog.threadCPUNanoseconds())
                var (position, read, sum) = (Int64.min, 0, 0)
                while true {
                    var batch = 0
                    try connection.forEachEventRow(after: position, limit: 100, now: 0) { row in
                        position = row.seq
                        batch += 1
                        sum &+= row.parameters.count &+ Int(row.parameters.last ?? 0) &+ (row.traits?.count ?? 0)
                        return true
                    }
                    read += batch
                    if batch < 100 { break }
                }
                precondition(read >= count && sum != 0)
                best = (min(best.wall, now() - start), min(best.cpu, EventLog.threadCPUNanoseconds() - cpu))
            }
            return best
        }
        await engine.close()
        return (Double(best.0) / Double(count) / 1_000, Double(best.1) / Double(count) / 1_000)
    }

    /// Copies every file in `source` into `destination`.
    private static func copyFiles(from source: URL, to destination: URL) throws {
        for file in try FileManager.default.contentsOfDirectory(atPath: source.path) {
            try FileManager.default.copyItem(
                at: source.appendingPathComponent(file), to: destination.appendingPathComponent(file))
        }
    }

    /// The sealer's seal and open of one event's parameters, in µs per
    /// call, on the session of an engine's connection.
    private func sealerCost() async throws -> (seal: Double, open: Double) {
        var configuration = EngineConfiguration(consent: false)
        Self.encrypt(&configuration, true)
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        guard let database = engine.databaseQueue else { throw SpoolError.notStarted }
        let costs = try await database.run { connection -> (Double, Double) in
            guard let sealing = connection.sealing else { throw SpoolError.notStarted }
            let json = Array(ListenerBenchmarks.encodedParameters.utf8)
            let id = Array("0190f3a2-7c1e-7b44-9a55-6f1d2e3c4b5a".utf8)
            var fastest = (seal: UInt64.max, open: UInt64.max)
            var output = [UInt8](repeating: 0, count: json.count)
            for _ in 0..<20 {
                // As the writer seals (runs of 64) and the drain opens.
                let start = now()
                for index in 0..<10_000 {
                    if index % 64 == 0 { sealing.startRun() }
                    _ = try json.withUnsafeBytes { json in
                        try id.withUnsafeBytes { try sealing.sealInRun(json, for: .event($0)) }
                    }
                }
                let sealed = try json.withUnsafeBytes { json in
                    try id.withUnsafeBytes { Array(try sealing.seal(json, for: .event($0))) }
                }
                let opening = now()
                sealing.takeKeys()
                for _ in 0..<10_000 {
                    let count = sealed.withUnsafeBytes { sealed in
                        id.withUnsafeBytes { id in
                            output.withUnsafeMutableBytes { sealing.openInRun(sealed, for: .event(id), into: $0) }
                        }
                    }
                    precondition(count == json.count)
                }
                fastest = (min(fastest.seal, opening - start), min(fastest.open, now() - opening))
            }
            return (Double(fastest.seal) / 10_000 / 1_000, Double(fastest.open) / 10_000 / 1_000)
        }
        await engine.close()
        return costs
    }
}
