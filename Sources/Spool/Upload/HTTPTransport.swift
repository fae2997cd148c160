import Foundation
import SpoolStorage

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// POSTs upload requests with URLSession (FoundationNetworking on Linux):
/// the built-in ``UploadTransport``.
///
/// Redirects follow ``RedirectPolicy``: URLSession itself never follows one
/// (a session delegate refuses them all, so the 3xx comes back here), and the
/// transport re-sends the request only for a same-origin 307 or 308.
///
/// The session is always Spool's own, made from a configuration, so that the
/// redirect-refusing delegate is always installed: a ready-made `URLSession`
/// comes with its own delegate (or none), and would follow redirects.
final class HTTPTransport: CallbackUploadTransport {
    private let session: URLSession
    private let redirects: RedirectPolicy

    /// `timeout` as this platform's URLSession honours it: FoundationNetworking
    /// drops the fraction of a timeout, so under a second every request would
    /// time out at once.
    static func effectiveTimeout(_ timeout: TimeInterval) -> TimeInterval {
        #if canImport(FoundationNetworking)
            return max(1, timeout)
        #else
            return timeout
        #endif
    }

    /// - Parameter configuration: copied; Spool sets its timeouts, as many
    ///   connections per host as requests may be in flight
    ///   (``EngineConfiguration/maximumConcurrentRequestsLimit``; the
    ///   engine's setting decides how many are) and no response cache, and
    ///   keeps everything
    ///   else (proxies, TLS settings, additional headers, cookies, cellular
    ///   access). Nil: an ephemeral configuration without cookies.
    init(
        requestTimeout: TimeInterval, configuration: URLSessionConfiguration? = nil,
        redirects: RedirectPolicy = RedirectPolicy()
    ) {
        let requestTimeout = Self.effectiveTimeout(requestTimeout)
        self.redirects = redirects
        let given = configuration
        let configuration: URLSessionConfiguration
        if let given {
            // Copied: a caller changing its configuration later changes nothing here.
            configuration = (given.copy() as? URLSessionConfiguration) ?? .ephemeral
        } else {
            configuration = .ephemeral
            configuration.httpCookieStorage = nil
        }
        configuration.timeoutIntervalForRequest = requestTimeout
        configuration.timeoutIntervalForResource = requestTimeout * 2
        configuration.httpMaximumConnectionsPerHost = EngineConfiguration.maximumConcurrentRequestsLimit
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.urlCache = nil
        // The session retains its delegate until invalidated: a separate
        // object, so the session and the transport do not keep each other.
        session = URLSession(configuration: configuration, delegate: RedirectRefusal(), delegateQueue: nil)
    }

    deinit {
        session.finishTasksAndInvalidate()
    }

    /// Sends `request`, following only what ``RedirectPolicy`` allows.
    ///
    /// Cancelling the calling task cancels the request in flight; it then
    /// throws `CancellationError`.
    func send(_ request: UploadRequest) async throws -> UploadResponse {
        let cancel = Protected<(@Sendable () -> Void)?>(nil)
        let result = await awaitCallback(
            cancelled: Result<UploadResponse, any Error>.failure(CancellationError()),
            onCancel: { cancel.withLock { $0 }?() }
        ) { finish in
            let cancelRequest = send(request, completion: finish)
            cancel.withLock { $0 = cancelRequest }
        }
        return try result.get()
    }

    /// Sends `request`, following only what ``RedirectPolicy`` allows, and
    /// calls `completion` once, after the upload's last request.
    ///
    /// The returned closure cancels the request in flight. It holds the
    /// task weakly: the uploader keeps it until the dispatch timeout, and a
    /// strong hold would keep the finished task, its request and the body
    /// (up to 3.5 MB) alive that long. URLSession holds a task until it
    /// finishes, so a task that can still be cancelled is always there;
    /// and Spool never releases a task itself (FoundationNetworking on Linux
    /// crashes in its redirect callback when a finished task is released
    /// from its own completion handler).
    func send(
        _ request: UploadRequest, completion: @escaping @Sendable (Result<UploadResponse, any Error>) -> Void
    ) -> @Sendable () -> Void {
        let task = Protected<WeakBox<URLSessionTask>?>(nil)
        send(request.urlRequest, body: request.body, original: request.url, hops: 0, task: task, completion: completion)
        return { task.withLock { $0 }?.object?.cancel() }
    }

    /// Sends `request` with `body`; on a 3xx, asks the redirect policy
    /// whether to send it again elsewhere. Calls `completion` once, after
    /// the last request of the upload.
    ///
    /// The task's handler holds the transport until the upload's last request
    /// ends, so a follow-up never starts on an invalidated session.
    private func send(
        _ request: URLRequest, body: Data, original: URL, hops: Int, task current: Protected<WeakBox<URLSessionTask>?>,
        completion: @escaping @Sendable (Result<UploadResponse, any Error>) -> Void
    ) {
        var withBody = request
        withBody.httpBody = body
        let task = session.dataTask(with: withBody) { data, response, error in
            if let error {
                completion(.failure(error))
                return
            }
            guard let response = response as? HTTPURLResponse else {
                completion(.failure(URLError(.badServerResponse)))
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
                    self.send(
                        next, body: body, original: original, hops: hops + 1, task: current, completion: completion)
                case .stop(let message):
                    var answer = UploadResponse(response, body: data)
                    answer.note = message
                    completion(.success(answer))
                }
                return
            }
            completion(.success(UploadResponse(response, body: data)))
        }
        current.withLock { $0 = WeakBox(task) }
        task.resume()
    }
}

// MARK: - Callbacks to async

/// Waits for the one value `start` delivers through its callback, or for the
/// task's cancellation, whichever comes first: then `cancelled` is returned
/// and `onCancel` runs. A callback after that, or a second one, is ignored.
func awaitCallback<Value: Sendable>(
    cancelled: Value, onCancel: @escaping @Sendable () -> Void = {},
    _ start: (_ finish: @escaping @Sendable (Value) -> Void) -> Void
) async -> Value {
    let state = Protected<(waiting: CheckedContinuation<Value, Never>?, finished: Bool)>((nil, false))
    let take: @Sendable () -> CheckedContinuation<Value, Never>? = {
        state.withLock { state in
            defer { state = (nil, true) }
            return state.waiting
        }
    }
    return await withTaskCancellationHandler {
        await withCheckedContinuation { continuation in
            let cancelledAlready = state.withLock { state -> Bool in
                if !state.finished { state.waiting = continuation }
                return state.finished
            }
            if cancelledAlready {
                continuation.resume(returning: cancelled)
                return
            }
            start { value in take()?.resume(returning: value) }
        }
    } onCancel: {
        take()?.resume(returning: cancelled)
        onCancel()
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
