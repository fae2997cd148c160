import CSQLite
import Foundation
import Spool
import SpoolStorage

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The end-to-end tail, and what bounds it: how many requests the engine
/// got answered while the events were being recorded, and what the same
/// number of requests costs through URLSession alone, measured in the same
/// run against the same collector.
extension DrainBenchmarks {
    /// When a round's requests went, from its `upload_batches` rows (times in ms).
    struct RequestTimes {
        /// Requests sent before the last `record` returned, and their
        /// median time in flight (transport and collector).
        var whileRecording = 0
        var flightWhileRecording = Double.nan
        /// The requests sent after it: their median time in flight, and the
        /// median time from one's send to the next's.
        var afterwards = 0
        var flightAfterwards = Double.nan
        var between = Double.nan
        /// The median body before gzip, in bytes.
        var bodyBytes = 0
    }

    /// The end-to-end tail: a fresh engine records 20,000 varied events as
    /// fast as one thread can (batches of 100 go out meanwhile, gzipped, to
    /// the loopback collector) and calls `flush()`; the time from the last
    /// `record` returning until the collector has answered for every event
    /// (`flush()` returns only then). Five rounds (two with `--quick`).
    ///
    /// Beside it, the transport's floor: as many POSTs as the engine sent
    /// after the last `record`, one at a time, each with a body of the
    /// median size gzipped, through an ephemeral URLSession to the same
    /// collector, with no engine.
    ///
    /// With `concurrentRequests` above 1 (``EngineConfiguration/maximumConcurrentRequests``),
    /// the same with that many requests in flight, which gives up arrival
    /// order; its floor is still the one-at-a-time one.
    func tail(concurrentRequests: Int = 1) async throws {
        guard let collector = LoopbackCollector(purpose: "the end-to-end tail", lean: true) else { return }
        defer { collector.stop() }
        let count = 20_000
        var tails: [Double] = []
        var recordings: [Double] = []
        var rounds: [RequestTimes] = []
        var requests: [Double] = []
        // The collector's CPU is part of the tail, not another process's.
        let window = MachineSnapshot.take(countingAsOwn: [collector.process.processIdentifier])
        for _ in 0..<(quick ? 2 : 5) {
            let scratch = Scratch("tail")
            let engine = Self.loopbackEngine(
                on: scratch.database, count: count, collector: collector.url, concurrentRequests: concurrentRequests)
            try await engine.start()
            let first = now()
            for index in 0..<count {
                let (name, parameters) = UploadFormatBenchmarks.variants[index % UploadFormatBenchmarks.variants.count]
                try engine.recordRetrying(name, parameters: parameters)
            }
            let (last, lastWall) = (now(), Date().timeIntervalSince1970)
            try await engine.flush()
            tails.append(seconds(since: last))
            recordings.append(Double(last - first) / 1e6)
            let statistics = try await engine.uploadStatistics()
            precondition(statistics.pending == 0 && statistics.uploaded > count, "the collector lacks events")
            requests.append(Double(statistics.requests))
            await engine.close()
            rounds.append(Self.requestTimes(scratch.database, lastRecord: lastWall))
        }
        let counted = try collector.countedEvents()
        precondition(counted >= tails.count * (count + 1), "the collector counted \(counted) events")
        let afterwards = Int(Samples(values: rounds.map { Double($0.afterwards) }).median)
        let bodyBytes = Int(Samples(values: rounds.map { Double($0.bodyBytes) }).median)
        let floor = try await Self.transportFloor(
            requests: afterwards, bodyBytes: bodyBytes, collector: collector.url, rounds: quick ? 2 : 5)
        let samples = Samples(values: tails)
        let interval = samples.medianInterval
        func median(_ values: [Double]) -> String { formatNumber(Samples(values: values).median) }
        let detail = [
            "median of \(tails.count) rounds, interval \(formatNumber(interval.low))–\(formatNumber(interval.high)) s",
            "\(count) events recorded unthrottled in \(median(recordings)) ms while batches of 100 go out gzipped, then flush()",
            "\(median(requests)) requests to the lean Python collector: \(median(rounds.map { Double($0.whileRecording) })) sent while recording (each \(median(rounds.map(\.flightWhileRecording))) ms in flight)",
            "\(afterwards) after the last record(), each \(median(rounds.map(\.flightAfterwards))) ms in flight and sent \(median(rounds.map(\.between))) ms after the one before",
            "the transport's floor, \(afterwards) POSTs of \(bodyBytes) bytes before gzip through URLSession alone, one at a time: \(formatNumber(floor)) s",
        ].joined(separator: "; ")
        let inFlight = concurrentRequests == 1 ? "" : ", \(concurrentRequests) requests in flight"
        report.add(
            Row(
                area: "upload", name: "end-to-end tail, last record() until the loopback collector has 20k" + inFlight,
                value: samples.median, unit: "s", detail: detail,
                target: concurrentRequests == 1 ? 0.2 : nil, comparison: .atMost, low: interval.low,
                high: interval.high, rounds: tails.count,
                othersShare: window.othersShare()))
    }

    /// A backlog drained across a round trip, where requests in flight
    /// together wait together: 5,000 varied events recorded while uploads
    /// are paused, then resumed and flushed to the lean collector answering
    /// each request 20 ms after it arrives, with one request in flight and
    /// with two. Events per second (no target).
    func roundTrips() async throws {
        let delay = 0.02
        guard
            let collector = LoopbackCollector(purpose: "the drain across a round trip", lean: true, delay: delay)
        else { return }
        defer { collector.stop() }
        let count = 5_000
        var rates: [Int: [Double]] = [:]
        for _ in 0..<(quick ? 1 : 3) {
            for concurrentRequests in [1, 2] {
                let scratch = Scratch("round-trips")
                let engine = Self.loopbackEngine(
                    on: scratch.database, count: count, collector: collector.url,
                    concurrentRequests: concurrentRequests)
                try await engine.start()
                try await engine.pauseUploads()
                for index in 0..<count {
                    let (name, parameters) = UploadFormatBenchmarks.variants[
                        index % UploadFormatBenchmarks.variants.count]
                    try engine.recordRetrying(name, parameters: parameters)
                }
                try await engine.settle()
                let start = now()
                try await engine.resumeUploads()
                try await engine.flush()
                rates[concurrentRequests, default: []].append(Double(count) / seconds(since: start))
                let pending = try await engine.uploadStatistics().pending
                precondition(pending == 0, "\(pending) events were not uploaded")
                await engine.close()
            }
        }
        let one = Samples(values: rates[1] ?? []).median
        for (concurrentRequests, values) in rates.sorted(by: { $0.key < $1.key }) {
            let rate = Samples(values: values).median
            let detail =
                concurrentRequests == 1
                ? "\(count) events in batches of 100, gzipped, each answered \(Int(delay * 1_000)) ms after it arrives; median of \(values.count)"
                : "\(formatNumber(rate / one)) × one at a time; arrival order given up; median of \(values.count)"
            let requests = concurrentRequests == 1 ? "1 request" : "\(concurrentRequests) requests"
            report.add(
                Row(
                    area: "upload", name: "drain across a 20 ms round trip, \(requests) in flight", value: rate,
                    unit: "events/s", detail: detail))
        }
    }

    /// A round's requests from the `upload_batches` rows of its closed
    /// engine's file, split at `lastRecord` (seconds since 1970, the clock
    /// of `sent_at`).
    static func requestTimes(_ database: URL, lastRecord: Double) -> RequestTimes {
        let raw = RawSQLite(path: database.path)
        let statement = raw.prepare("SELECT sent_at, duration_ms, body_bytes FROM upload_batches ORDER BY id")
        defer { sqlite3_finalize(statement) }
        var (during, after, between, bytes): ([Double], [Double], [Double], [Double]) = ([], [], [], [])
        var previous: Double?
        while sqlite3_step(statement) == SQLITE_ROW {
            let sentAt = sqlite3_column_double(statement, 0)
            let duration = sqlite3_column_double(statement, 1)
            bytes.append(sqlite3_column_double(statement, 2))
            if sentAt < lastRecord {
                during.append(duration)
            } else {
                after.append(duration)
                if let previous { between.append((sentAt - previous) * 1_000) }
            }
            previous = sentAt
        }
        return RequestTimes(
            whileRecording: during.count, flightWhileRecording: Samples(values: during).median,
            afterwards: after.count, flightAfterwards: Samples(values: after).median,
            between: Samples(values: between).median, bodyBytes: Int(Samples(values: bytes).median))
    }

    /// The median over `rounds` of the seconds `requests` POSTs of a body
    /// of about `bodyBytes` before gzip take through an ephemeral
    /// URLSession (one connection, as Spool's transport keeps), one after
    /// another, to `collector`, each sent from a data task's completion
    /// handler as Spool's transport sends. The body's JSON has no `id` keys, so the
    /// lean collector counts no events in it.
    static func transportFloor(requests: Int, bodyBytes: Int, collector: URL, rounds: Int) async throws -> Double {
        // Varied events until the body, before gzip, is the size asked for.
        var text = Data("[".utf8)
        var index = 0
        while text.count < bodyBytes {
            let (name, parameters) = UploadFormatBenchmarks.variants[index % UploadFormatBenchmarks.variants.count]
            // The parameters' description as a JSON string: its quotes escaped.
            let described = parameters.description.replacingOccurrences(of: "\"", with: "\\\"")
            text.append(Data("{\"n\":\(index),\"name\":\"\(name)\",\"p\":\"\(described)\"},".utf8))
            index += 1
        }
        text.append(Data("{}]".utf8))
        let body = Gzip.compress(text) ?? text
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpMaximumConnectionsPerHost = 1
        configuration.urlCache = nil
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        var request = URLRequest(url: collector)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.setValue("gzip", forHTTPHeaderField: "Content-Encoding")
        request.httpBody = body
        var times: [Double] = []
        for _ in 0..<rounds {
            let start = now()
            for _ in 0..<requests {
                // A data task with a completion handler, as Spool's transport sends.
                let status = try await withCheckedThrowingContinuation {
                    (continuation: CheckedContinuation<Int, any Error>) in
                    session.dataTask(with: request) { _, response, error in
                        if let error { return continuation.resume(throwing: error) }
                        continuation.resume(returning: (response as? HTTPURLResponse)?.statusCode ?? 0)
                    }.resume()
                }
                precondition(status == 200, "the collector answered \(status)")
            }
            times.append(seconds(since: start))
        }
        return Samples(values: times).median
    }
}
