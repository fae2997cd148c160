import Foundation
import Spool

// The identity modes of spool-crash-child: each drives the public identity
// API in its own process, so the test process checks the file another
// process wrote (see main.swift for the command lines).

/// A small deterministic generator, so that a failing interleaving can be
/// replayed from its seed.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// What the identity in force should be: the user, the anonymous id's epoch
/// (one more after each `reset()`), the traits' tag and the context's tag.
struct IdentityModel {
    var user: String?
    var epoch = 0
    var traits: Int?
    var context: Int?

    func line(_ file: Int, _ id: String) -> String {
        "EV \(file) \(id) \(user ?? "-") \(epoch) \(traits.map(String.init) ?? "-") \(context.map(String.init) ?? "-")"
    }
}

/// `--interleavings SEED COUNT`: in the folder DATABASE_PATH, runs COUNT
/// random interleavings of identify, reset, alias, setContext, record,
/// commits and restarts (with calls made before `start()`), each on a file
/// of its own (`<n>.sqlite`). Prints `EV <n> <event> <user> <epoch>
/// <traits> <context>` for each accepted event as the model expects it,
/// `BAD <n> …` when `identity()` after a restart differs from the model,
/// `NOW <n> <user> <epoch> <traits>` at the end of each, and `DONE`.
func runInterleavings(folder: URL, seed: UInt64, count: Int) async throws {
    var random = SplitMix64(state: seed)
    for file in 0..<count {
        try await runInterleaving(
            file, at: folder.appendingPathComponent("\(file).sqlite"), random: &random)
    }
    emit("DONE")
}

private func runInterleaving(_ file: Int, at url: URL, random: inout SplitMix64) async throws {
    var model = IdentityModel()
    var label = 0
    var engine = EventEngine(configuration: EngineConfiguration(database: .file(url)))

    /// An event is known by its id, or, held until `start()`, by its name
    /// (`name:event_<label>`; the identify and alias messages held there,
    /// `queued`, are counted only).
    func accepted(_ outcome: RecordOutcome, _ model: IdentityModel, name: String? = nil) {
        switch outcome {
        case .recorded(let id): emit(model.line(file, id))
        case .queuedUntilSessionStart: emit(model.line(file, name.map { "name:\($0)" } ?? "queued"))
        default: break
        }
    }
    /// One call other than a restart or a commit; what an app may do before
    /// `start()` too.
    func call(_ engine: EventEngine, _ random: inout SplitMix64) throws {
        label += 1
        switch Int.random(in: 0..<100, using: &random) {
        case 0..<45:
            accepted(try engine.record("event_\(label)"), model, name: "event_\(label)")
        case 45..<63:
            let traits = Bool.random(using: &random) ? label : nil
            model.user = "user-\(label)"
            model.traits = traits
            accepted(try engine.identify(userId: model.user, traits: traits.map { ["t": .int($0)] } ?? [:]), model)
        case 63..<75:
            engine.reset()
            model.user = nil
            model.traits = nil
            model.epoch += 1
        case 75..<87:
            model.user = "alias-\(label)"
            accepted(try engine.alias(model.user!), model)
        default:
            try engine.setContext(EventContext(custom: ["c": .int(label)]))
            model.context = label
        }
    }

    try await engine.start()
    for _ in 0..<Int.random(in: 8...24, using: &random) {
        switch Int.random(in: 0..<100, using: &random) {
        case 0..<10:
            accepted(try await engine.recordDurably("commit"), model)
        case 10..<18:
            await engine.close()
            // A context is the process's own: a new launch sets its own.
            model.context = nil
            engine = EventEngine(configuration: EngineConfiguration(database: .file(url)))
            for _ in 0..<Int.random(in: 0...2, using: &random) { try call(engine, &random) }
            try await engine.start()
            let identity = try await engine.identity()
            if identity.userId != model.user || (identity.traits["t"]?.intValue).map({ Int($0) }) != model.traits {
                emit("BAD \(file) after a restart: \(identity.userId ?? "-"), expected \(model.user ?? "-")")
            }
        default:
            try call(engine, &random)
        }
    }
    await engine.close()
    emit("NOW \(file) \(model.user ?? "-") \(model.epoch) \(model.traits.map(String.init) ?? "-")")
}

/// Whether the test that started this process (`parent`, read at its
/// start) has ended: its control folder went with its temporary directory,
/// or the test process itself is gone. The identity modes keep no deadline
/// of their own: the test bounds how long it waits for them, and they stop
/// once it has ended.
func testEnded(control: URL, parent: pid_t) -> Bool {
    getppid() != parent || !FileManager.default.fileExists(atPath: control.path)
}

/// `--rounds CONTROL_DIR ROUNDS PER_ROUND`: records for `user-W`, then for
/// each round k waits for CONTROL_DIR/round-k (another process has made its
/// identity change by then), records PER_ROUND events `round` with
/// {"round": k} without waiting between them, and prints `ROUND k` once the
/// last is durable; prints `ENDED k` instead when the test ended while it
/// waited for round k, and `CLOSED` at the end.
func runRounds(_ url: URL, control: URL, rounds: Int, perRound: Int) async throws {
    let parent = getppid()
    let engine = EventEngine(configuration: EngineConfiguration(database: .file(url), maximumRetainedEvents: nil))
    try await engine.start()
    try engine.identify(userId: "user-W")
    _ = try await engine.recordDurably("before_rounds")
    emit("READY")
    for round in 1...rounds {
        let signal = control.appendingPathComponent("round-\(round)").path
        while !FileManager.default.fileExists(atPath: signal), !testEnded(control: control, parent: parent) {
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        guard FileManager.default.fileExists(atPath: signal) else {
            emit("ENDED \(round)")
            break
        }
        for index in 0..<perRound - 1 {
            try engine.record("round", parameters: ["round": .int(round), "i": .int(index)])
        }
        _ = try await engine.recordDurably("round", parameters: ["round": .int(round), "i": .int(perRound - 1)])
        emit("ROUND \(round)")
    }
    await engine.close()
    emit("CLOSED")
}

/// `--erasure-recorder CONTROL_DIR`: identifies `W1` … `W5` (each written
/// before the next), prints `READY`, then records `p1` events (every 20th
/// durably) and prints `RECORDED n` every 500 until CONTROL_DIR/stop exists
/// or the test has ended; then prints `IDENTITY <user>` and `DONE`.
func runErasureRecorder(_ url: URL, control: URL) async throws {
    let parent = getppid()
    let engine = EventEngine(configuration: EngineConfiguration(database: .file(url), maximumRetainedEvents: nil))
    try await engine.start()
    for index in 1...5 {
        try engine.identify(userId: "W\(index)")
        _ = try await engine.identity()
    }
    emit("READY")
    let stop = control.appendingPathComponent("stop").path
    var count = 0
    while !FileManager.default.fileExists(atPath: stop), !testEnded(control: control, parent: parent) {
        for _ in 0..<19 {
            count += 1
            try engine.record("p1", parameters: ["n": .int(count)])
        }
        count += 1
        _ = try await engine.recordDurably("p1", parameters: ["n": .int(count)])
        if count % 500 == 0 { emit("RECORDED \(count)") }
    }
    let identity = try await engine.identity()
    emit("IDENTITY \(identity.userId ?? "-")")
    await engine.close()
    emit("DONE")
}
