import Foundation
import SpoolStorage

/// Reading the collector's answer: Spool's own rules first (only a 2xx is
/// delivery, a redirect or an interim answer is tried later), then the
/// format's verdict.
extension Uploader {
    /// What an answer means for the events of the request.
    enum Reading {
        case accepted
        case perEvent([UploadVerdict.EventResult], status: Int)
        /// Try later: no answer, a redirect, 5xx, 408, 429.
        case transient(String, retryAfter: TimeInterval?, status: Int?)
        /// About the request, not its events.
        case requestRefused(String, retryAfter: TimeInterval?, status: Int)
        /// Something in it was refused; `singled`: the format says these
        /// very events (``UploadVerdict/rejected(reason:)``).
        case eventsRefused(String, status: Int, singled: Bool)

        var status: Int? {
            switch self {
            case .accepted: 200
            case .perEvent(_, let status), .requestRefused(_, _, let status), .eventsRefused(_, let status, _):
                status
            case .transient(_, _, let status): status
            }
        }
    }

    /// Reads an answer by Spool's rules, then the format's verdict.
    func read(_ answer: UploadClient.Answer, eventCount: Int) -> Reading {
        guard case .response(let response, _) = answer else {
            if case .failed(let reason) = answer { return .transient(reason, retryAfter: nil, status: nil) }
            return .transient("no answer", retryAfter: nil, status: nil)
        }
        let status = response.status
        if (300..<400).contains(status) || status < 200 {
            // A redirect (or an interim answer) is never success and never a
            // reason to give up on the events, whatever the format says.
            return .transient(
                UploadVerdict.describe(response), retryAfter: status < 200 ? response.retryAfter : nil, status: status)
        }
        switch client.format.verdict(for: response, eventCount: eventCount) {
        case .accepted where (200..<300).contains(status):
            return .accepted
        case .perEvent(let results) where (200..<300).contains(status):
            return .perEvent(results, status: status)
        case .accepted, .perEvent:
            // Only a 2xx answer is delivery.
            return .transient(UploadVerdict.describe(response), retryAfter: response.retryAfter, status: status)
        case .retry(let reason, let retryAfter):
            return .transient(reason, retryAfter: retryAfter, status: status)
        case .refusedRequest(let reason, let retryAfter):
            return .requestRefused(reason, retryAfter: retryAfter, status: status)
        case .split(let reason):
            return .eventsRefused(reason, status: status, singled: false)
        case .rejected(let reason):
            return .eventsRefused(reason, status: status, singled: true)
        }
    }

    /// Whether a 415 names gzip as a coding the collector accepts (then the
    /// 415 is about something else).
    static func acceptsGzip(_ response: UploadResponse) -> Bool {
        guard let header = response.value(forHeader: "Accept-Encoding") else { return false }
        return header.split(separator: ",").contains { coding in
            let parts = coding.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
            guard parts.first == "gzip" || parts.first == "x-gzip" else { return false }
            // "gzip;q=0" refuses it.
            return !parts.dropFirst().contains { $0.replacingOccurrences(of: " ", with: "") == "q=0" }
        }
    }
}
