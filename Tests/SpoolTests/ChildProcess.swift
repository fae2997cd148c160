import Foundation

#if os(Linux) || os(macOS)
    /// A program the tests start, with `posix_spawn`: it inherits its three
    /// standard streams and no other descriptor of the test process.
    ///
    /// Foundation's `Process` is not used on Linux: before each spawn it
    /// lists `/proc/self/fd`, copying 256 bytes of every entry's name, and
    /// the last entry of a full listing (about 1,360 descriptors, which the
    /// suite holds at its busiest) sits at the end of its buffer, so that
    /// copy can run off a mapped page and crash the whole test run.
    final class ChildProcess: @unchecked Sendable {
        // Safe: `exit` is read and written under `lock`.
        let processIdentifier: pid_t
        private let lock = NSLock()
        private var exit: Int32?

        /// Starts `executable` with `arguments` and, when given, exactly
        /// `environment`; each stream is the descriptor given (the caller
        /// keeps and closes it), or `/dev/null` when nil.
        init(
            _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
            standardInput: Int32? = nil, standardOutput: Int32? = nil, standardError: Int32? = nil
        ) throws {
            let null = open("/dev/null", O_RDWR)
            guard null >= 0 else { throw TestSetupError("cannot open /dev/null: errno \(errno)") }
            defer { close(null) }
            #if os(Linux)
                var actions = posix_spawn_file_actions_t()
                var attributes = posix_spawnattr_t()
            #else
                var actions: posix_spawn_file_actions_t?
                var attributes: posix_spawnattr_t?
            #endif
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawnattr_init(&attributes)
            defer { posix_spawnattr_destroy(&attributes) }
            for (source, target) in [(standardInput, 0), (standardOutput, 1), (standardError, 2)] {
                posix_spawn_file_actions_adddup2(&actions, source ?? null, Int32(target))
            }
            // Its own process group, as Foundation does: a terminal's ^C
            // reaches the test run, which then ends its children itself.
            var flags = Int32(POSIX_SPAWN_SETPGROUP)
            #if os(Linux)
                try Self.closeTheRest(&actions)
            #else
                flags |= Int32(POSIX_SPAWN_CLOEXEC_DEFAULT)
            #endif
            posix_spawnattr_setflags(&attributes, Int16(flags))

            let argv = ([executable] + arguments).map { strdup($0) } + [nil]
            defer { for argument in argv { free(argument) } }
            let variables = (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0)=\($1)") } + [nil]
            defer { for variable in variables { free(variable) } }
            var pid = pid_t()
            var (argumentList, variableList) = (argv, variables)
            let code = posix_spawn(&pid, executable, &actions, &attributes, &argumentList, &variableList)
            guard code == 0 else { throw TestSetupError("cannot start \(executable): errno \(code)") }
            processIdentifier = pid
        }

        #if os(Linux)
            typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32

            /// Has the child close every descriptor from 3 up: glibc's
            /// `posix_spawn_file_actions_addclosefrom_np` (2.34 and later,
            /// looked up because Swift does not import it), or else one
            /// close per descriptor `/proc/self/fd` lists now.
            static func closeTheRest(_ actions: inout posix_spawn_file_actions_t) throws {
                if let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") {
                    guard unsafeBitCast(symbol, to: CloseFrom.self)(&actions, 3) == 0 else {
                        throw TestSetupError("posix_spawn_file_actions_addclosefrom_np failed")
                    }
                    return
                }
                for name in try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") {
                    if let descriptor = Int32(name), descriptor > 2 {
                        posix_spawn_file_actions_addclose(&actions, descriptor)
                    }
                }
            }
        #endif

        /// A pipe whose ends are not inherited by children started meanwhile.
        static func pipe() throws -> (read: Int32, write: Int32) {
            var ends: [Int32] = [0, 0]
            guard Foundation.pipe(&ends) == 0 else { throw TestSetupError("pipe failed: errno \(errno)") }
            for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
            return (ends[0], ends[1])
        }

        /// A descriptor writing to `url` from its start, for a child's output.
        static func writing(to url: URL) throws -> Int32 {
            let descriptor = open(url.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard descriptor >= 0 else { throw TestSetupError("cannot write \(url.path): errno \(errno)") }
            return descriptor
        }

        /// Whether the child has not ended yet.
        var isRunning: Bool { status(waiting: false) == nil }

        /// Blocks until the child ends.
        func waitUntilExit() { _ = status(waiting: true) }

        /// Its exit code, or the signal that ended it; after ``waitUntilExit()``.
        var terminationStatus: Int32 {
            guard let status = status(waiting: false) else { preconditionFailure("still running") }
            return Self.killedBySignal(status) ? status & 0x7f : (status >> 8) & 0xff
        }

        /// Whether a signal ended it; after ``waitUntilExit()``.
        var endedBySignal: Bool {
            guard let status = status(waiting: false) else { preconditionFailure("still running") }
            return Self.killedBySignal(status)
        }

        /// Sends `signal` to the child, unless it has ended.
        func send(_ signal: Int32) {
            if isRunning { kill(processIdentifier, signal) }
        }

        /// The child's wait status once it has ended (reaped once, here).
        private func status(waiting: Bool) -> Int32? {
            lock.withLock {
                if let exit { return exit }
                var status: Int32 = 0
                var result: pid_t
                repeat {
                    result = waitpid(processIdentifier, &status, waiting ? 0 : WNOHANG)
                } while result == -1 && errno == EINTR
                if result == processIdentifier { exit = status }
                return exit
            }
        }

        private static func killedBySignal(_ status: Int32) -> Bool {
            (status & 0x7f) != 0 && (status & 0x7f) != 0x7f
        }
    }
#endif

/// ``runProcess(_:_:input:)`` on a thread of its own, for async tests: a
/// test waiting for a program holds none of the concurrency pool's threads
/// (two on a 2-core machine, shared by the whole suite) meanwhile.
@discardableResult
func runProcess(_ executable: String, _ arguments: [String], input: String? = nil) async throws -> (
    status: Int32, output: String, error: String
) {
    try await onOwnThread { Result { try runProcess(executable, arguments, input: input) } }.get()
}

/// Runs a program and returns its exit status and standard output.
@discardableResult
func runProcess(_ executable: String, _ arguments: [String], input: String? = nil) throws -> (
    status: Int32, output: String, error: String
) {
    #if os(Linux) || os(macOS)
        let (inputPipe, output, errors) = (try ChildProcess.pipe(), try ChildProcess.pipe(), try ChildProcess.pipe())
        let process: ChildProcess
        do {
            defer { for end in [inputPipe.read, output.write, errors.write] { close(end) } }  // the child's ends
            process = try ChildProcess(
                executable, arguments, standardInput: inputPipe.read, standardOutput: output.write,
                standardError: errors.write)
        } catch {
            for end in [inputPipe.write, output.read, errors.read] { close(end) }
            throw error
        }
        let writing = FileHandle(fileDescriptor: inputPipe.write, closeOnDealloc: false)
        if let input { writing.write(Data(input.utf8)) }
        try writing.close()
        let outData = FileHandle(fileDescriptor: output.read, closeOnDealloc: true).readDataToEndOfFile()
        let errData = FileHandle(fileDescriptor: errors.read, closeOnDealloc: true).readDataToEndOfFile()
        process.waitUntilExit()
        return (
            process.terminationStatus, String(decoding: outData, as: UTF8.self),
            String(decoding: errData, as: UTF8.self)
        )
    #else
        throw TestFacilities.Missing.childProcesses
    #endif
}

/// Starts `executable`, kills it with SIGKILL `milliseconds` after it
/// started (or, with `afterLine`, after it wrote a line with that prefix,
/// waiting at most 30 s for one), and returns the whole lines it wrote to
/// standard output (a line the kill cut has no newline and is dropped) and
/// whether the signal ended it.
func runUntilKilled(
    _ executable: String, _ arguments: [String], milliseconds: Int, afterLine prefix: String? = nil
) async throws -> (lines: [String], killed: Bool) {
    #if os(Linux) || os(macOS)
        let outputURL = FileManager.default.temporaryDirectory.appendingPathComponent("spool-child-\(UUID()).out")
        guard FileManager.default.createFile(atPath: outputURL.path, contents: nil) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: outputURL.path])
        }
        defer { try? FileManager.default.removeItem(at: outputURL) }  // try?: a leftover temporary file is harmless
        let written = try ChildProcess.writing(to: outputURL)
        let process: ChildProcess
        do {
            defer { close(written) }
            process = try ChildProcess(executable, arguments, standardOutput: written)
        }
        func text() -> String { (try? String(contentsOf: outputURL, encoding: .utf8)) ?? "" }  // try?: not yet written
        if let prefix {
            try await waitUntil(timeout: 30, interval: 0.005) {
                text().split(separator: "\n").contains { $0.hasPrefix(prefix) } || !process.isRunning
            }
        }
        // The kill's moment is what the caller tests: the one real sleep here.
        try await Task.sleep(nanoseconds: UInt64(milliseconds) * 1_000_000)
        process.send(SIGKILL)
        await onOwnThread { process.waitUntilExit() }
        let lines = text().split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
        return (lines, process.endedBySignal)
    #else
        throw TestFacilities.Missing.childProcesses
    #endif
}
