import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// POSTs bodies with URLSession (FoundationNetworking on Linux).
final class HTTPTransport: Sendable {
    private let session: URLSession
    let requestTimeout: TimeInterval

    init(requestTimeout: TimeInterval) {
        self.requestTimeout = requestTimeout
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = requestTimeout
        configuration.timeoutIntervalForResource = requestTimeout * 2
        configuration.httpMaximumConnectionsPerHost = 1
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.urlCache = nil
        configuration.httpCookieStorage = nil
        session = URLSession(configuration: configuration)
    }

    deinit {
        session.finishTasksAndInvalidate()
    }

    /// POSTs `event.body` unchanged to `event.url` (D7).
    func send(_ event: EventForDispatch, completion: @escaping DispatchCompletionHandler) {
        var request = URLRequest(
            url: event.url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: requestTimeout)
        request.httpMethod = "POST"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = event.body
        let task = session.dataTask(with: request) { data, response, error in
            if let error {
                completion(.transportFailure(String(describing: error)))
                return
            }
            guard let response = response as? HTTPURLResponse else {
                completion(.transportFailure("not an HTTP response"))
                return
            }
            let message = data.flatMap { String(decoding: $0.prefix(200), as: UTF8.self) }
            completion(
                .response(
                    status: response.statusCode,
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
