import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// POSTs bodies with URLSession (FoundationNetworking on Linux).
///
/// Redirects follow ``RedirectPolicy``: URLSession itself never follows one
/// (a session delegate refuses them all, so the 3xx comes back here), and the
/// transport re-sends the request only for a same-origin 307 or 308.
final class HTTPTransport: Sendable {
    private let session: URLSession
    private let redirects: RedirectPolicy
    let requestTimeout: TimeInterval

    init(requestTimeout: TimeInterval, redirects: RedirectPolicy = RedirectPolicy()) {
        self.requestTimeout = requestTimeout
        self.redirects = redirects
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = requestTimeout
        configuration.timeoutIntervalForResource = requestTimeout * 2
        configuration.httpMaximumConnectionsPerHost = 1
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.urlCache = nil
        configuration.httpCookieStorage = nil
        // The session retains its delegate until invalidated: a separate
        // object, so the session and the transport do not keep each other.
        session = URLSession(configuration: configuration, delegate: RedirectRefusal(), delegateQueue: nil)
    }

    deinit {
        session.finishTasksAndInvalidate()
    }

    /// POSTs `event.body` unchanged to `event.url` (D7).
    ///
    /// Calls `completion` once, after the last request of the upload (one
    /// more per redirect followed).
    func send(_ event: EventForDispatch, completion: @escaping DispatchCompletionHandler) {
        var request = URLRequest(
            url: event.url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: requestTimeout)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = event.body
        send(request, original: event.url, hops: 0, completion: completion)
    }

    /// Sends `request`; on a 3xx, asks the redirect policy whether to send it
    /// again elsewhere.
    ///
    /// The task's handler holds the transport until the upload's last request
    /// ends, so a follow-up never starts on an invalidated session.
    private func send(
        _ request: URLRequest, original: URL, hops: Int, completion: @escaping DispatchCompletionHandler
    ) {
        let task = session.dataTask(with: request) { data, response, error in
            if let error {
                completion(.transportFailure(String(describing: error)))
                return
            }
            guard let response = response as? HTTPURLResponse else {
                completion(.transportFailure("not an HTTP response"))
                return
            }
            let status = response.statusCode
            if (300..<400).contains(status), let url = request.url {
                switch self.redirects.decision(
                    status: status, location: response.value(forHTTPHeaderField: "Location"), requestURL: url,
                    original: original, hops: hops)
                {
                case .follow(let target):
                    var next = request
                    next.url = target
                    self.send(next, original: original, hops: hops + 1, completion: completion)
                case .stop(let message):
                    completion(.response(status: status, retryAfter: nil, message: message))
                }
                return
            }
            let message = data.flatMap { String(decoding: $0.prefix(200), as: UTF8.self) }
            completion(
                .response(
                    status: status,
                    retryAfter: Self.retryAfter(response.value(forHTTPHeaderField: "Retry-After")),
                    message: message))
        }
        task.resume()
    }

    /// `Retry-After` as seconds: either delta-seconds or an HTTP date.
    static func retryAfter(_ header: String?, now: Date = Date()) -> TimeInterval? {
        guard let header = header?.trimmingCharacters(in: .whitespaces), !header.isEmpty else { return nil }
        if let seconds = TimeInterval(header) { return max(0, seconds) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: header) else { return nil }
        return max(0, date.timeIntervalSince(now))
    }
}

// MARK: - Redirect refusal

/// The session delegate that stops URLSession from following any redirect,
/// so the 3xx response reaches ``HTTPTransport``.
///
/// It must be the *session's* delegate: on Linux a per-task delegate is not
/// asked about redirects. Stateless, hence Sendable.
private final class RedirectRefusal: NSObject, URLSessionTaskDelegate, Sendable {
    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(nil)
    }
}
