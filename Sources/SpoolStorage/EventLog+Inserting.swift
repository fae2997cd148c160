import Foundation

/// Writing one pending event's row: sealing its parameters (with a
/// sealer) and binding and stepping the insert.
extension EventLog.Pending {
    /// Binds the event at `pending` to the prepared insert and steps it (the
    /// caller binds its message type and target). The id is formatted on the
    /// stack and every text is bound without a copy: all of it stays valid
    /// until the step inside these scopes.
    ///
    /// Static, on a pointer into the group: a method called on an element
    /// would run on a copy of it (a retain and release of each of its
    /// strings and its stamps).
    ///
    /// With `sealed` (its parameters and target, sealed by
    /// ``seal(_:count:in:ranges:)``), `parameters` holds JSON `null` (and
    /// the caller binds the target NULL).
    static func insert(
        _ pending: UnsafePointer<Self>, as seq: Int64, with insert: Statement, sealed: UnsafeRawBufferPointer?
    ) throws {
        let milliseconds = pending.pointee.milliseconds
        let random = pending.pointee.random
        try EventID.withUTF8(milliseconds: milliseconds, random: random.high, random.low) { id in
            try withUTF8Bytes(of: pending.pointee.record.name) { name in
                try insert.bind(seq, at: 1)
                try insert.bindTextNoCopy(id.assumingMemoryBound(to: UInt8.self), at: 2)
                try insert.bindTextNoCopy(name, at: 3)
                try insert.bind(pending.pointee.record.recordedAt, at: 5)
                try insert.bind(pending.pointee.record.priority, at: 7)
                if let sealed {
                    // In the session's run, which stays put until its next run.
                    try insert.bindBlobNoCopy(sealed, at: 13)
                    let null = Connection.sealedJSONBytes
                    try insert.bindTextNoCopy(
                        UnsafeBufferPointer(start: null.utf8Start, count: null.utf8CodeUnitCount), at: 4)
                    try step(pending, insert)
                } else {
                    try withUTF8Bytes(of: pending.pointee.record.parametersJSON) { json in
                        try insert.bindTextNoCopy(json, at: 4)
                        try step(pending, insert)
                    }
                }
            }
        }
        insert.resetKeepingBindings()
    }

    /// Binds the event's session and steps the insert.
    private static func step(_ pending: UnsafePointer<Self>, _ insert: Statement) throws {
        if pending.pointee.record.sessionID == nil {
            try insert.bindNull(at: 6)
            try insert.step()
        } else {
            try withUTF8Bytes(of: pending.pointee.record.sessionID!) { session in
                try insert.bindTextNoCopy(session, at: 6)
                try insert.step()
            }
        }
    }

    /// How many rows the writer seals at a time, ahead of their inserts:
    /// enough for the cipher to stay in the processor's caches from one
    /// value to the next (``SealingSession/startRun()``), few enough that
    /// the run's buffer stays small.
    static let sealedRun = 64

    /// Seals the parameters (and target, ``SealedEventValue``) of the
    /// `count` events from `pending`, each for its id, as a new run of
    /// `sealing`'s, and sets `ranges` to where each sits in it.
    static func seal(
        _ pending: UnsafePointer<Self>, count: Int, in sealing: SealingSession, ranges: inout [Range<Int>]
    ) throws {
        sealing.startRun()
        ranges.removeAll(keepingCapacity: true)
        for event in pending..<(pending + count) {
            try EventID.withUTF8(
                milliseconds: event.pointee.milliseconds, random: event.pointee.random.high, event.pointee.random.low
            ) { id in
                try withUTF8Bytes(of: event.pointee.record.parametersJSON) { json in
                    guard let target = event.pointee.record.target else {
                        ranges.append(try sealing.sealInRun(UnsafeRawBufferPointer(json), for: .event(id)))
                        return
                    }
                    // A group's or an alias's target is sealed with its parameters.
                    let plain = SealedEventValue.joining(target: target, parameters: UnsafeRawBufferPointer(json))
                    ranges.append(try plain.withUnsafeBytes { try sealing.sealInRun($0, for: .event(id)) })
                }
            }
        }
    }
}
