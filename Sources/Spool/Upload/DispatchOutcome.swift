import Foundation

/// How one dispatch ended.
public enum DispatchOutcome: Sendable, Hashable {
    /// The collector answered with this HTTP status (any status, 2xx or not).
    /// `retryAfter` is the parsed `Retry-After` header, in seconds; `message`
    /// is the start of the response body, for dead-letter reasons.
    case response(status: Int, retryAfter: TimeInterval?, message: String?)
    /// No answer: offline, connection refused or reset, timed out.
    case transportFailure(String)

    /// True for a 2xx response.
    public var isSuccess: Bool {
        if case .response(let status, _, _) = self { return (200..<300).contains(status) }
        return false
    }
}
