import Foundation
@_spi(FormatAuthoring) @_spi(TransportAuthoring) import Spool

/// What encryption at rest costs: `record` until durable and the drain
/// through the Spool format, each with `encryption` on against off in the
/// same run, and the caller's side of `record` (sealing runs on the writer).
struct EncryptionBenchmarks {
    let quick: Bool
    let report: Report

    /// One fixed key: the benchmark measures sealing, not a key store.
    struct FixedKey: EncryptionKeyProvider {
        func currentKey() throws -> EncryptionKey {
            try EncryptionKey(id: "bench", bytes: [UInt8](repeating: 0x42, count: 32))
        }
        func key(withID id: String) throws -> EncryptionKey? { try currentKey() }
    }

    static func encrypt(_ configuration: inout EngineConfiguration, _ encrypted: Bool) {
        if encrypted { configuration.encryption = .aesGCM(keyProvider: FixedKey()) }
    }

    /// Records `count` events (10 parameters) and waits until they are
    /// durable: calls per second, and the writer's thread CPU per event (µs).
    func recordUntilDurable(count: Int, encrypted: Bool) async throws -> (rate: Double, writerCPU: Double) {
        let scratch = Scratch(encrypted ? "sealed" : "readable")
        var configuration = EngineConfiguration.unbounded(scratch.database)
        Self.encrypt(&configuration, encrypted)
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        let start = now()
        for _ in 0..<count { try engine.recordRetrying("purchase", parameters: ListenerBenchmarks.parameters) }
        try await engine.settle()
        let rate = Double(count) / seconds(since: start)
        let writerCPU = (engine.eventLog?.writerCPUPerEvent ?? .nan) / 1_000
        await engine.close()
        return (rate, writerCPU)
    }

    /// An engine on `database` uploading the Spool format, uncompressed,
    /// through `transport`, parked an hour after its first refusal.
    func stubbedEngine(on database: URL, count: Int, encrypted: Bool, transport: any UploadTransport)
        -> EventEngine
    {
        let dispatcher = DefaultEventDispatcher(
            format: .spool,
            request: UploadRequestOptions(compression: .identity), transport: transport)
        var configuration = DrainBenchmarks.stubbedConfiguration(
            database: database, dispatcher: dispatcher, maximumRetainedEvents: count * 2)
        Self.encrypt(&configuration, encrypted)
        return EventEngine(configuration: configuration)
    }

    /// A file holding `count` events, sealed or not, recorded while the
    /// collector refuses them, its engine closed.
    func fill(count: Int, encrypted: Bool) async throws -> Scratch {
        let scratch = Scratch(encrypted ? "sealed-backlog" : "readable-backlog")
        let engine = stubbedEngine(
            on: scratch.database, count: count, encrypted: encrypted,
            transport: UploadFormatBenchmarks.StubTransport())
        try await engine.start()
        for _ in 0..<count { try engine.recordRetrying("purchase", parameters: ListenerBenchmarks.parameters) }
        try await engine.settle()
        await engine.close()
        return scratch
    }

    /// Opens a copy of `backlog` while the stub refuses, then times one flush
    /// of everything: events per second.
    func drain(_ backlog: Scratch, count: Int, encrypted: Bool) async throws -> Double {
        let scratch = try Scratch(copying: backlog, "sealed-drain")
        let stub = UploadFormatBenchmarks.StubTransport()
        stub.status.withLock { $0 = 500 }
        let engine = stubbedEngine(on: scratch.database, count: count, encrypted: encrypted, transport: stub)
        try await engine.start()
        let pending = try await engine.uploadStatistics().pending
        precondition(pending >= count, "the copy holds \(pending) of \(count) events")
        return try await DrainBenchmarks.timeDrain(engine, of: pending, in: scratch.database) {
            stub.status.withLock { $0 = 200 }
        }
    }

    /// The caller's side of `record` alone, in µs per call, on an engine
    /// whose consent gate drops the event: the fastest run of 10,000 calls.
    func callerCost(count: Int, encrypted: Bool) async throws -> Double {
        var configuration = EngineConfiguration(consent: false)
        Self.encrypt(&configuration, encrypted)
        let engine = EventEngine(configuration: configuration)
        try await engine.start()
        var fastest = UInt64.max
        for _ in 0..<max(1, count / 10_000) {
            let start = now()
            for _ in 0..<10_000 { try engine.record("purchase", parameters: ListenerBenchmarks.parameters) }
            fastest = min(fastest, now() - start)
        }
        await engine.close()
        return Double(fastest) / 10_000 / 1_000
    }

    func run() async throws {
        let rounds = quick ? 3 : 5
        let count = quick ? 50_000 : 200_000
        let recording = try await Comparison.measure(rounds: rounds, target: 0.8) {
            try await recordUntilDurable(count: count, encrypted: true).rate
        } baseline: {
            try await recordUntilDurable(count: count, encrypted: false).rate
        }
        report.add(
            recording, area: "encryption", unit: "events/s", spool: "record until durable, encryption on",
            spoolDetail: "\(count) calls, 10 parameters, AES-256-GCM on the writer",
            baseline: "record until durable, encryption off",
            ratio: "ratio record with encryption / without", target: 0.8)

        let drained = quick ? 20_000 : 100_000
        let sealed = try await fill(count: drained, encrypted: true)
        let readable = try await fill(count: drained, encrypted: false)
        let draining = try await Comparison.measure(rounds: rounds, target: 0.8) {
            try await drain(sealed, count: drained, encrypted: true)
        } baseline: {
            try await drain(readable, count: drained, encrypted: false)
        }
        report.add(
            draining, area: "encryption", unit: "events/s", spool: "drain, Spool format, encryption on",
            spoolDetail: "\(drained) events, 100/batch, each value opened, transport stubbed",
            baseline: "the same drain, encryption off",
            ratio: "ratio drain with encryption / without", target: 0.8)

        var callers: (sealed: [Double], readable: [Double]) = ([], [])
        for _ in 0..<rounds {
            callers.sealed.append(try await callerCost(count: count, encrypted: true))
            callers.readable.append(try await callerCost(count: count, encrypted: false))
        }
        report.add(
            Row(
                area: "encryption", name: "caller's cost per record, encryption on (fastest 10,000 calls)",
                value: Samples(values: callers.sealed).median, unit: "µs",
                detail: "encryption off in the same run: \(formatNumber(Samples(values: callers.readable).median)) µs;"
                    + " median of \(rounds) loops; sealing runs on the writer"))
    }
}
