/// Why a flush did not upload everything.
public enum UploadError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The collector could not be reached or answered with a retryable status;
    /// the events stay queued and are retried with backoff.
    case retryable(String)

    /// The reason, for logs.
    public var description: String {
        switch self {
        case .retryable(let reason): return "Upload failed, events kept for a retry: \(reason)"
        }
    }
}
