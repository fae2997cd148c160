/// How often each ``SpoolDiagnostic/Kind`` was reported since the engine was
/// created, and how many events each concerned.
public struct DiagnosticCounts: Sendable, Hashable {
    /// Reports per kind.
    public internal(set) var occurrences: [SpoolDiagnostic.Kind: Int] = [:]
    /// Events per kind.
    public internal(set) var events: [SpoolDiagnostic.Kind: Int] = [:]

    mutating func add(_ kind: SpoolDiagnostic.Kind, eventCount: Int) {
        occurrences[kind, default: 0] += 1
        events[kind, default: 0] += eventCount
    }
}
