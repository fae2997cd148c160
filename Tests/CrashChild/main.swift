// spool-crash-child DATABASE_PATH RUN_TAG [MODE …]
//
// A real second process for the tests that cross a process boundary.
//
// (no mode)   Appends events forever and prints "ACK <id>" for each once its
//             commit is acknowledged. The crash tests SIGKILL it at random
//             moments and check every acknowledged event is in the database
//             exactly once and in order.
// --engine    The same through EventEngine.recordDurably, with a durable
//             listener "crash" that prints "GOT <marker>" for each event it
//             finishes; each event carries its marker in the "id" parameter.
// --sealed   The same with encryption on (key "child", 32 bytes of 0x5A):
//             identifies with RUN_TAG in the user id and traits, sets a context
//             holding it, and records durably with RUN_TAG in each event's
//             "secret" parameter, printing "ACK <n>" per commit.
// --worker COLLECTOR_URL START_AT SECONDS
//             Waits until START_AT (seconds since 1970), starts an uploading
//             engine on the file (two workers start on a new file together),
//             records durably for SECONDS, printing "ACK <event id>" per
//             commit and "BUSY" for every SQLITE_BUSY a caller saw, then
//             flushes, closes and prints "DONE".
// --disk-full LIMIT_BYTES
//             Records under a real file-size limit (RLIMIT_FSIZE, SIGXFSZ
//             ignored, so writes fail with EFBIG): prints "ACK <marker>",
//             "BUFFERED <marker>" (stillBuffered), "REFUSED <marker>"
//             (bufferFull) or "ERR <marker> <error>", then lifts the limit,
//             closes and prints "CLOSED <uncommitted>" and the diagnostic counts.
// --open START_AT
//             Waits until START_AT, then starts an engine with an uploader and
//             a durable listener (every first-launch registration), prints
//             "READY" or "STARTFAIL <error>", and closes.
// --suspension CONTROL_DIR
//             Drives the public SpoolBackgroundNotifier: prints "SUSPENDED"
//             once the database let go of the file in the background and
//             waits for CONTROL_DIR/checked1; records durably in the
//             background, prints "SUSPENDED2" once it let go again and waits
//             for CONTROL_DIR/checked2; then becomes active, records, closes
//             and prints "DONE".
// --notifier COLLECTOR_URL
//             An uploading engine records one event (printing "ID <event id>"),
//             then the public SpoolBackgroundNotifier sends the app to the
//             background (upload, then suspension: "SUSPENDED") and back;
//             prints "DONE".
// --two-launches FIRST SECOND
//             Starts an engine on the file, records FIRST events and closes it
//             (everything checkpointed into the file); starts a second one,
//             records SECOND events (the last with recordDurably), prints
//             "ACKED", and idles until killed: the second launch's commits
//             are then in the WAL only.
// --identify USER_ID
//             Starts an engine on the file, identifies USER_ID (traits
//             {"by": RUN_TAG}), prints "IDENTIFIED <anonymous id>" once the
//             change is in the file, and closes.
// --interleavings SEED COUNT, --rounds CONTROL_DIR ROUNDS PER_ROUND,
// --erasure-recorder CONTROL_DIR
//             The identity modes: see IdentityModes.swift.
// --surveys   Records purchases under surveys with filtered rules, printing
//             "TRIGGER <survey> <marker>" for each trigger: see SurveyMode.swift.
// --overflow BOUND COUNT
//             Starts an engine on the file that keeps at most BOUND events and
//             does not upload, records COUNT events (the last durably), closes
//             and prints "DONE": the bound drops what no one uploaded yet.
// --killed-erasure
//             Records events carrying RUN_TAG, then erases while a read
//             transaction of its own holds the WAL; once the erasure's rows
//             are deleted it prints "COMMITTED" and sends itself SIGKILL, in
//             the rebuild that follows (see ErasureMode.swift).
// --hold-open-lock
//             Takes the lock start() takes to open the file (the mark's),
//             prints "LOCKED" and idles until killed.
// --cycles N  Starts, records into and closes an engine on the file N times
//             after 50 warm-up cycles, printing "BEFORE <fds> <rss>" and
//             "AFTER <fds> <rss>" (open descriptors, resident bytes or -1),
//             each after "DESCRIPTORS <fd>=<target> …" on Linux.
import Foundation
import Spool
import SpoolStorage

endWhenOrphaned()

let arguments = CommandLine.arguments
guard arguments.count >= 3 else {
    FileHandle.standardError.write(Data("usage: spool-crash-child DATABASE_PATH RUN_TAG [MODE …]\n".utf8))
    exit(2)
}
let url = URL(fileURLWithPath: arguments[1])
let tag = arguments[2]
let mode = arguments.count > 3 ? arguments[3] : ""

switch mode {
case "--engine":
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

case "--sealed":
    var configuration = EngineConfiguration(database: .file(url), maximumRetainedEvents: nil)
    configuration.encryption = .aesGCM(keyProvider: ChildKey())
    let engine = EventEngine(configuration: configuration)
    try await engine.start()
    try engine.identify(userId: "user-\(tag)", traits: ["note": .string("trait-\(tag)")])
    try engine.setContext(EventContext(custom: ["note": .string("context-\(tag)")]))
    emit("READY")
    var counter = 0
    while true {
        counter += 1
        _ = try await engine.recordDurably("sealed_event", parameters: ["secret": .string("\(tag)-\(counter)")])
        emit("ACK \(counter)")
    }

case "--worker":
    guard arguments.count >= 7, let collector = URL(string: arguments[4]), let startAt = Double(arguments[5]),
        let seconds = Double(arguments[6])
    else { exit(2) }
    let engine = EventEngine(
        configuration: EngineConfiguration(
            database: .file(url), maximumRetainedEvents: nil, collectorURL: collector, batchSize: 10,
            uploadInterval: 0.2, dispatcher: DefaultEventDispatcher(requestTimeout: 5),
            retryPolicy: RetryPolicy(initialDelay: 0.05, maximumDelay: 0.5)))
    // Both workers open the new file at the same moment.
    try await waitForStartTime(startAt)
    do {
        try await engine.start()
    } catch {
        emit("STARTFAIL \(error)")
        exit(3)
    }
    emit("READY")
    let deadline = Date().addingTimeInterval(seconds)
    var counter = 0
    while Date() < deadline {
        counter += 1
        do {
            if case .recorded(let id) = try await engine.recordDurably(
                "worker_event", parameters: ["worker": .string(tag), "n": .int(counter)])
            {
                emit("ACK \(id)")
            }
        } catch SpoolError.sqlite(let failure) where failure.resultCode == .busy {
            emit("BUSY")
        } catch {
            emit("ERR \(error)")
        }
    }
    do { try await engine.flush() } catch { emit("FLUSH \(error)") }
    await engine.close()
    emit("DONE")
    exit(0)

case "--disk-full":
    guard arguments.count >= 5, let limit = UInt64(arguments[4]) else { exit(2) }
    signal(SIGXFSZ, SIG_IGN)
    let engine = EventEngine(
        configuration: EngineConfiguration(
            database: .file(url), maximumRetainedEvents: nil,
            writeBuffer: WriteBufferLimit(maximumEvents: 40, maximumBytes: 1 << 20)))
    try await engine.start()
    let padding = String(repeating: "p", count: 2_000)
    var counter = 0
    func next() -> (String, [String: EventValue]) {
        counter += 1
        let marker = "\(tag)-\(counter)"
        return (marker, ["id": .string(marker), "pad": .string(padding)])
    }
    for _ in 0..<20 {
        let (marker, parameters) = next()
        _ = try await engine.recordDurably("disk_event", parameters: parameters)
        emit("ACK \(marker)")
    }
    // The disk is full from here on: no file may grow past `limit` bytes.
    var limits = rlimit()
    getrlimit(Int32(RLIMIT_FSIZE.rawValue), &limits)
    let hard = limits.rlim_max
    limits.rlim_cur = rlim_t(limit)
    setrlimit(Int32(RLIMIT_FSIZE.rawValue), &limits)
    var buffered = 0
    while buffered < 10 && counter < 2_000 {
        let (marker, parameters) = next()
        do {
            _ = try await engine.recordDurably("disk_event", parameters: parameters)
            emit("ACK \(marker)")
        } catch SpoolError.stillBuffered {
            buffered += 1
            emit("BUFFERED \(marker)")
        } catch {
            emit("ERR \(marker) \(error)")
        }
    }
    // Plain record() while commits fail: the buffer's bound refuses, never grows.
    for _ in 0..<100 {
        let (marker, parameters) = next()
        do {
            try engine.record("disk_event", parameters: parameters)
            emit("QUEUED \(marker)")
        } catch SpoolError.bufferFull {
            emit("REFUSED \(marker)")
        } catch {
            emit("ERR \(marker) \(error)")
        }
    }
    // Space comes back.
    limits.rlim_cur = hard
    setrlimit(Int32(RLIMIT_FSIZE.rawValue), &limits)
    let uncommitted = await engine.close()
    emit("CLOSED \(uncommitted)")
    let counts = engine.diagnosticCounts
    emit(
        "DIAG commitFailed=\(counts.occurrences[.commitFailed] ?? 0) "
            + "commitRecovered=\(counts.occurrences[.commitRecovered] ?? 0) "
            + "recordRefused=\(counts.occurrences[.recordRefused] ?? 0)")
    exit(0)

case "--identify":
    guard arguments.count >= 5 else { exit(2) }
    let engine = EventEngine(configuration: EngineConfiguration(database: .file(url)))
    try await engine.start()
    try engine.identify(userId: arguments[4], traits: ["by": .string(tag)])
    let identity = try await engine.identity()
    emit("IDENTIFIED \(identity.anonymousId)")
    await engine.close()
    exit(0)

case "--interleavings":
    guard arguments.count >= 6, let seed = UInt64(arguments[4]), let count = Int(arguments[5]) else { exit(2) }
    try await runInterleavings(folder: url, seed: seed, count: count)
    exit(0)

case "--rounds":
    guard arguments.count >= 7, let rounds = Int(arguments[5]), let perRound = Int(arguments[6]) else { exit(2) }
    try await runRounds(url, control: URL(fileURLWithPath: arguments[4]), rounds: rounds, perRound: perRound)
    exit(0)

case "--erasure-recorder":
    guard arguments.count >= 5 else { exit(2) }
    try await runErasureRecorder(url, control: URL(fileURLWithPath: arguments[4]))
    exit(0)

case "--surveys":
    try await runSurveys(url, tag: tag)

case "--killed-erasure":
    try await runKilledErasure(url, marker: tag)
    exit(0)

case "--overflow":
    guard arguments.count >= 6, let bound = Int(arguments[4]), let count = Int(arguments[5]) else { exit(2) }
    try await runOverflow(url, bound: bound, count: count)
    exit(0)

case "--hold-open-lock":
    let mark = StoreMark(databasePath: url.path)
    mark?.lock()
    emit(mark == nil ? "NO MARK" : "LOCKED")
    while true { _ = pause() }  // until the test's SIGKILL

case "--open":
    guard arguments.count >= 5, let startAt = Double(arguments[4]) else { exit(2) }
    let engine = EventEngine(
        configuration: EngineConfiguration(
            database: .file(url), collectorURL: URL(string: "http://127.0.0.1:9/unused"), uploadInterval: 3_600,
            dispatcher: DefaultEventDispatcher()))
    let printer = Printer()
    engine.events.addDurableObserver(printer, id: "open")
    try await waitForStartTime(startAt)
    do {
        try await engine.start()
        emit("READY")
    } catch {
        emit("STARTFAIL \(error)")
    }
    await engine.close()
    exit(0)

case "--suspension":
    guard arguments.count >= 5 else { exit(2) }
    let control = URL(fileURLWithPath: arguments[4])
    // As long as the test waits for each line: the suite runs many
    // processes side by side on two cores, and a background window is a
    // task that waits for a thread like any other.
    // A suspended database still opens short windows for work that arrives
    // (the listener's position save after a delivery): suspended counts once
    // it has held for 200 ms.
    func waitFor(_ suspended: Bool, _ engine: EventEngine) async throws -> Bool {
        try await poll(seconds: 30, steady: 0.2) { engine.isDatabaseSuspended == suspended }
    }
    func waitForFile(_ name: String) async throws {
        let path = control.appendingPathComponent(name).path
        try await poll(seconds: 30) { FileManager.default.fileExists(atPath: path) }
    }
    let engine = EventEngine(configuration: EngineConfiguration(database: .file(url)))
    let printer = Printer()
    engine.events.addDurableObserver(printer, id: "suspension")
    try await engine.start()
    for index in 0..<200 { try engine.record("foreground", parameters: ["n": .int(index)]) }
    _ = try await engine.recordDurably("foreground_last")
    SpoolBackgroundNotifier.applicationDidEnterBackground()
    emit(try await waitFor(true, engine) ? "SUSPENDED" : "NOT SUSPENDED")
    try await waitForFile("checked1")
    _ = try await engine.recordDurably("background", parameters: ["id": "background"])
    emit("RECORDED")
    let recorded = Date()
    let suspendedAgain = try await waitFor(true, engine)
    emit(suspendedAgain ? "SUSPENDED2" : "NOT SUSPENDED2 after \(Date().timeIntervalSince(recorded)) s")
    try await waitForFile("checked2")
    SpoolBackgroundNotifier.applicationDidBecomeActive()
    guard try await waitFor(false, engine) else {
        emit("NOT RESUMED")
        exit(1)
    }
    _ = try await engine.recordDurably("foreground_again", parameters: ["id": "foreground_again"])
    await engine.close()
    emit("DONE")
    exit(0)

case "--notifier":
    guard arguments.count >= 5, let collector = URL(string: arguments[4]) else { exit(2) }
    let engine = EventEngine(
        configuration: EngineConfiguration(
            database: .file(url), collectorURL: collector, batchSize: 50, uploadInterval: 60,
            dispatcher: DefaultEventDispatcher(requestTimeout: 5)))
    try await engine.start()
    if case .recorded(let id) = try await engine.recordDurably("via_notifier") { emit("ID \(id)") }
    SpoolBackgroundNotifier.applicationDidEnterBackground()
    emit(try await poll(seconds: 10, steady: 0.2) { engine.isDatabaseSuspended } ? "SUSPENDED" : "NOT SUSPENDED")
    SpoolBackgroundNotifier.applicationDidBecomeActive()
    await engine.close()
    emit("DONE")
    exit(0)

case "--two-launches":
    guard arguments.count >= 6, let first = Int(arguments[4]), let second = Int(arguments[5]) else { exit(2) }
    for (launch, count) in [(1, first), (2, second)] {
        let engine = EventEngine(configuration: EngineConfiguration(database: .file(url)))
        try await engine.start()
        for index in 0..<max(0, count - 1) { try engine.record("launch\(launch)", parameters: ["i": .int(index)]) }
        _ = try await engine.recordDurably("launch\(launch)", parameters: ["i": .int(count - 1)])
        if launch == 1 {
            await engine.close()
        } else {
            emit("ACKED")
            while true { _ = pause() }  // idle, the engine open, until the test's SIGKILL
        }
    }

case "--cycles":
    guard arguments.count >= 5, let cycles = Int(arguments[4]) else { exit(2) }
    func cycle() async throws {
        let engine = EventEngine(configuration: EngineConfiguration(database: .file(url)))
        try await engine.start()
        try engine.record("cycle")
        await engine.close()
    }
    func measure() -> String {
        let open = (0..<Int32(4_096)).filter { fcntl($0, F_GETFD) != -1 }
        #if os(Linux)
            // What each is, for a test that finds one more after the cycles.
            let targets = open.map { descriptor -> String in
                let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(descriptor)")
                return "\(descriptor)=\(target ?? "?")"
            }
            emit("DESCRIPTORS \(targets.joined(separator: " "))")
        #endif
        let descriptors = open.count
        var resident = -1
        #if os(Linux)
            if let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
                let pages = statm.split(separator: " ").dropFirst().first.flatMap({ Int($0) })
            {
                resident = pages * Int(sysconf(Int32(_SC_PAGESIZE)))
            }
        #endif
        return "\(descriptors) \(resident)"
    }
    for _ in 0..<50 { try await cycle() }
    emit("BEFORE \(measure())")
    for _ in 0..<cycles { try await cycle() }
    emit("AFTER \(measure())")
    exit(0)

default:
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
}
