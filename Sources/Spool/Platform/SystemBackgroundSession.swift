import Foundation
import SpoolStorage

#if canImport(Darwin)
    /// A background `URLSession`: the system's transfer service sends the
    /// files handed to it while the app is suspended or not running. Only
    /// calls here; what the reports mean is the uploader's
    /// (``Uploader/settleNextReport()``).
    final class SystemBackgroundSession: BackgroundTransferSession {
        private let session: URLSession

        init(
            identifier: String, sharedContainer: String?,
            events: @escaping @Sendable (BackgroundTransferEvent) -> Void
        ) {
            // Available since iOS 8, macOS 10.10, tvOS 9 and watchOS 2, below
            // every floor Spool supports.
            let configuration = URLSessionConfiguration.background(withIdentifier: identifier)
            configuration.sharedContainerIdentifier = sharedContainer
            configuration.sessionSendsLaunchEvents = true
            configuration.isDiscretionary = false
            configuration.urlCache = nil
            configuration.httpCookieStorage = nil
            session = URLSession(
                configuration: configuration, delegate: BackgroundSessionDelegate(events: events), delegateQueue: nil)
        }

        func upload(_ request: UploadRequest, bodyFile: URL, batchID: String) throws {
            let task = session.uploadTask(with: request.urlRequest, fromFile: bodyFile)
            task.taskDescription = batchID
            task.resume()
        }

        func cancelAll() {
            session.getAllTasks { tasks in
                for task in tasks { task.cancel() }
            }
        }
    }

    /// The session's delegate: each task's answer, by its batch id, and the
    /// end of a relaunch's deliveries.
    private final class BackgroundSessionDelegate: NSObject, URLSessionDataDelegate, Sendable {
        private let events: @Sendable (BackgroundTransferEvent) -> Void
        /// The start of each task's response body.
        private let bodies = Protected([Int: Data]())

        init(events: @escaping @Sendable (BackgroundTransferEvent) -> Void) {
            self.events = events
        }

        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
            bodies.withLock { bodies in
                let kept = bodies[dataTask.taskIdentifier, default: Data()]
                bodies[dataTask.taskIdentifier] =
                    kept + data.prefix(max(0, UploadResponse.maximumBodyBytes - kept.count))
            }
        }

        func urlSession(
            _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
            newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
        ) {
            completionHandler(nil)  // the 3xx is the answer (see RedirectPolicy)
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
            let body = bodies.withLock { $0.removeValue(forKey: task.taskIdentifier) }
            guard let batchID = task.taskDescription else { return }
            if let response = task.response as? HTTPURLResponse {
                let answer = UploadResponse(response, body: body)
                events(.finished(batchID: batchID, answer: .response(answer, compressed: false)))
            } else {
                events(
                    .finished(batchID: batchID, answer: .failed(error.map { String(describing: $0) } ?? "no answer")))
            }
        }

        func urlSessionDidFinishEvents(forBackgroundURLSession session: URLSession) {
            events(.deliveredAll)
        }
    }
#endif
