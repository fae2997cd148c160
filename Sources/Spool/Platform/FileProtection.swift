import Foundation

/// The data-protection class of the database and its `-wal` and `-shm`
/// files, on the platforms that encrypt files per class (iOS, tvOS, watchOS,
/// visionOS). Elsewhere it has no effect.
public enum FileProtection: Sendable, Hashable {
    /// Readable and writable only while the device is unlocked. Spool then
    /// cannot open the database, or record to it, while the device is locked
    /// (a background push, a location update): choose it only for an app that
    /// never runs locked.
    case complete
    /// Opened while unlocked, usable after the device locks.
    case completeUnlessOpen
    /// Usable once the user has unlocked the device after a restart: what
    /// lets background work record while the device is locked. The default.
    case completeUntilFirstUserAuthentication
    /// No protection beyond the device's (`FileProtectionType.none`).
    case unprotected
}

/// Applies the configured protection class and backup exclusion to the
/// database files after each open (SQLite creates `-wal` and `-shm` anew when
/// the last connection closed them), and to the high-water mark beside them.
enum DatabaseFilePolicy {
    /// - Returns: what could not be applied, for a diagnostic; nil when all was.
    static func apply(
        to path: String, protection: FileProtection?, excludeFromBackup: Bool, on platform: any SpoolPlatform
    ) -> (any Error)? {
        var failure: (any Error)?
        for file in [path, path + "-wal", path + "-shm", path + "-mark"]
        where FileManager.default.fileExists(atPath: file) {
            do {
                try platform.applyFilePolicy(to: file, protection: protection, excludeFromBackup: excludeFromBackup)
            } catch {
                failure = failure ?? error
            }
        }
        return failure
    }
}

#if os(iOS) || os(tvOS) || os(watchOS) || os(visionOS)
    extension FileProtection {
        var type: FileProtectionType {
            switch self {
            case .complete: return .complete
            case .completeUnlessOpen: return .completeUnlessOpen
            case .completeUntilFirstUserAuthentication: return .completeUntilFirstUserAuthentication
            case .unprotected: return .none
            }
        }
    }
#endif
