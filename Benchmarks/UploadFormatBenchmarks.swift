import Foundation
@_spi(FormatAuthoring) @_spi(TransportAuthoring) import Spool
import SpoolStorage

/// Each batch format beside the raw-SQLite drain: the drain rate with the
/// body written by splicing stored bytes (transport stubbed, identity), the
/// same through an async-only transport and with gzip (its ratio to the raw
/// drain a target), the bytes each event puts on the wire raw and gzipped,
/// and what gzip costs per event.
struct UploadFormatBenchmarks {
    let quick: Bool
    let report: Report

    /// Refuses while the log fills (parking the uploader in backoff), then
    /// answers 200 at once, keeping the first bodies to be measured after the
    /// clock stops (a sample: keeping them all would make the drain pay for
    /// memory the real transport frees). It answers through a callback, as
    /// Spool's HTTP transport can: an identity request goes out from the
    /// uploader's queue, with no task — the hop profile of the dispatcher
    /// drain above, so the rows differ only in the format.
    final class StubTransport: CallbackUploadTransport {
        static let keptBodies = 200
        let status = Locked(500)
        let sent = Locked<[(body: Data, events: Int)]>([])

        func send(
            _ request: UploadRequest, completion: @escaping @Sendable (Result<UploadResponse, any Error>) -> Void
        ) -> @Sendable () -> Void {
            completion(.success(answer(request)))
            return {}
        }

        func send(_ request: UploadRequest) async throws -> UploadResponse {
            answer(request)
        }

        private func answer(_ request: UploadRequest) -> UploadResponse {
            let status = self.status.withLock { $0 }
            if status == 200 {
                sent.withLock { sent in
                    if sent.count < Self.keptBodies { sent.append((request.body, request.eventCount)) }
                }
            }
            return UploadResponse(status: status)
        }
    }

    /// The same stub behind the public protocol only: every request goes
    /// through a task and `async` (what a custom transport gets).
    struct AsyncOnlyTransport: UploadTransport {
        let stub: StubTransport
        func send(_ request: UploadRequest) async throws -> UploadResponse {
            try await stub.send(request)
        }
    }

    /// Events that differ as real ones do (names, screens, prices, SKUs,
    /// dates), so gzip is not measured on one event repeated: the same
    /// 1,000 variants, from a fixed seed, in every round.
    static let variants: [(String, [String: EventValue])] = {
        var state: UInt64 = 0x5EED
        func next(_ bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(bound))
        }
        let names = ["purchase", "screen_view", "add_to_cart", "search"]
        let screens = ["home", "search", "product", "cart", "checkout", "profile", "settings"]
        let categories = ["shoes", "shirts", "hats", "bags", "socks"]
        return (0..<1_000).map { index in
            let parameters: [String: EventValue] = [
                "screen": .string(screens[next(screens.count)]), "price": .double(Double(100 + next(99_900)) / 100),
                "currency": "EUR", "items": .int(1 + next(9)),
                "coupon": next(10) < 7 ? .null : .string("SAVE\(next(50))"), "first": .bool(next(2) == 0),
                "category": .string(categories[next(categories.count)]), "sku": .string("SKU-\(10_000 + next(89_999))"),
                "step": .int(index % 4),
                "at": .date(Date(timeIntervalSince1970: 1_764_411_330 + Double(next(86_400_000)) / 1_000)),
            ]
            return (names[next(names.count)], parameters)
        }
    }()

    static func formats() throws -> [(String, any BatchFormat)] {
        let segment: SegmentBatchFormat = try .segment(
            writeKey: "wk_0123456789abcdef", anonymousId: "6f1d2e3c-4b5a-4c1e-9a55-7b440190f3a2",
            context: [
                "app": ["name": "Demo", "version": "2.1.0", "build": "2100"],
                "device": ["manufacturer": "Apple", "model": "iPhone15,2", "type": "ios"],
                "os": ["name": "iOS", "version": "17.4"], "locale": "fr-FR", "timezone": "Europe/Paris",
            ])
        let (spool, kafkaREST): (SpoolBatchFormat, KafkaRESTBatchFormat) = (.spool, .kafkaREST)
        return [("Spool", spool), ("Segment", segment), ("Kafka REST", kafkaREST)]
    }

    func run() async throws {
        let count = quick ? 50_000 : 200_000
        let rounds = quick ? 3 : 5
        let baseline = DrainBenchmarks(quick: quick, report: report)
        for (label, format) in try Self.formats() {
            // Recorded once per format; each round drains a copy of it.
            let backlog = try await fill(count: count, format: format)
            let identity = StubTransport()
            let plain = try await Comparison.measure(rounds: rounds, target: 0.7) {
                try await drain(backlog, count: count, format: format, compression: .identity, stub: identity)
            } baseline: {
                baseline.rawDrain(count: count)
            }
            report.add(
                plain, area: "upload", unit: "events/s", spool: "\(label) drain, 100/batch, identity",
                spoolDetail: "read + splice into the \(label) body + advance + delete, \(count) events",
                baseline: "raw SQLite drain (beside \(label))", ratio: "ratio \(label) drain / raw drain",
                target: 0.7)

            let asyncStub = StubTransport()
            let throughAsync = try await Comparison.measure(rounds: quick ? 2 : 3) {
                try await drain(
                    backlog, count: count, format: format, compression: .identity, stub: asyncStub,
                    transport: AsyncOnlyTransport(stub: asyncStub))
            } baseline: {
                baseline.rawDrain(count: count)
            }
            add(
                throughAsync, "\(label) drain, identity, through an async transport",
                "a task and two more thread hops per request")

            let gzip = StubTransport()
            let compressed = try await Comparison.measure(rounds: rounds, target: 0.7) {
                try await drain(backlog, count: count, format: format, compression: .gzip, stub: gzip)
            } baseline: {
                baseline.rawDrain(count: count)
            }
            let spread = Samples(values: compressed.spool).spreadPercent
            report.add(
                Row(
                    area: "upload", name: "\(label) drain, gzip", value: Samples(values: compressed.spool).median,
                    unit: "events/s",
                    detail: "each body gzipped on another thread while the request before it is answered"
                        + (format.compressesByDefault ? " (the default)" : " (forced: identity is the default)")
                        + ", spread \(formatNumber(spread))%", othersShare: compressed.othersShare))
            report.add(
                report.ratioRow(
                    compressed, area: "upload", name: "ratio \(label) gzip drain / raw drain", target: 0.7))
            sizes(label, identity.sent.withLock { $0 })
        }
    }

    /// A drain row with its ratio to the raw drain in the detail (no target).
    func add(_ comparison: Comparison, _ name: String, _ detail: String) {
        let ratio = Samples(values: comparison.ratios).median
        report.add(
            Row(
                area: "upload", name: name, value: Samples(values: comparison.spool).median, unit: "events/s",
                detail: "ratio \(formatNumber(ratio)) × raw drain; \(detail)"))
    }

    /// An engine on `database` uploading through `format`, `compression`
    /// and `transport`, parked an hour after its first refusal.
    func stubbedEngine(
        on database: URL, count: Int, format: some BatchFormat, compression: UploadCompression,
        transport: any UploadTransport
    ) -> EventEngine {
        let dispatcher = DefaultEventDispatcher(
            format: format,
            request: UploadRequestOptions(compression: compression), transport: transport)
        return EventEngine(
            configuration: DrainBenchmarks.stubbedConfiguration(
                database: database, dispatcher: dispatcher, maximumRetainedEvents: count * 2))
    }

    /// A file holding `count` events of the variants, recorded while the
    /// collector refuses them, its engine closed.
    func fill(count: Int, format: some BatchFormat) async throws -> Scratch {
        let scratch = Scratch("format-backlog")
        let refusing = StubTransport()
        let engine = stubbedEngine(
            on: scratch.database, count: count, format: format, compression: .identity, transport: refusing)
        try await engine.start()
        for index in 0..<count {
            let (name, parameters) = Self.variants[index % Self.variants.count]
            try engine.recordRetrying(name, parameters: parameters)
        }
        try await engine.settle()
        await engine.close()
        return scratch
    }

    /// Opens a copy of `backlog` while `stub` refuses, then times one flush
    /// of everything through `format` and `transport` (the stub itself
    /// unless given): events per second.
    func drain(
        _ backlog: Scratch, count: Int, format: some BatchFormat, compression: UploadCompression,
        stub: StubTransport, transport: (any UploadTransport)? = nil, beforeDrain: () -> Void = {}
    ) async throws -> Double {
        let scratch = try Scratch(copying: backlog, "format-drain")
        stub.status.withLock { $0 = 500 }
        stub.sent.withLock { $0.removeAll(keepingCapacity: true) }
        let engine = stubbedEngine(
            on: scratch.database, count: count, format: format, compression: compression,
            transport: transport ?? stub)
        try await engine.start()
        let pending = try await engine.uploadStatistics().pending
        precondition(pending >= count, "the copy holds \(pending) of \(count) events")
        return try await DrainBenchmarks.timeDrain(engine, of: pending, in: scratch.database) {
            beforeDrain()
            stub.status.withLock { $0 = 200 }
        }
    }

    /// Bytes per event raw and gzipped, and gzip's time per event, from the
    /// identity bodies of the last round.
    func sizes(_ label: String, _ sent: [(body: Data, events: Int)]) {
        let events = sent.reduce(0) { $0 + $1.events }
        guard events > 0 else { return }
        let raw = sent.reduce(0) { $0 + $1.body.count }
        var gzipped = 0
        var costs: [Double] = []
        for pass in 0..<(quick ? 3 : 5) {
            var bytes = 0
            let start = now()
            for request in sent { bytes += Gzip.compress(request.body)?.count ?? request.body.count }
            costs.append(seconds(since: start) * 1e6 / Double(events))
            if pass == 0 { gzipped = bytes }
        }
        let cost = Samples(values: costs)
        report.add(
            Row(
                area: "upload", name: "\(label) bytes on the wire per event, raw",
                value: Double(raw) / Double(events), unit: "B",
                detail: "the first \(sent.count) bodies of 100 of the last round (\(events) events)"))
        report.add(
            Row(
                area: "upload", name: "\(label) bytes on the wire per event, gzipped",
                value: Double(gzipped) / Double(events), unit: "B",
                detail:
                    "\(formatNumber(Double(raw) / Double(max(1, gzipped)))) × smaller, zlib level \(Gzip.defaultLevel)")
        )
        report.add(
            Row(
                area: "upload", name: "\(label) gzip cost per event", value: cost.median, unit: "µs",
                detail:
                    "zlib level \(Gzip.defaultLevel) over each body of 100, spread \(formatNumber(cost.spreadPercent))%"
            ))
    }
}
