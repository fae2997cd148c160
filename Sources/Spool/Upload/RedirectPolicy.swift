import Foundation

/// What the HTTP transport does when a collector answers an upload with a 3xx.
///
/// URLSession never follows a redirect for Spool: following it is where
/// uploads get lost. A 301 or 302 is re-sent as a GET without the body, and
/// on Linux even a 307 or 308 is re-sent without the body, yet the next
/// server's 2xx would count as delivery. So the transport decides itself:
///
/// - A **307 or 308 to the same origin** (scheme, host and port equal, with 80
///   and 443 standing for a missing http and https port) is sent again by the
///   transport with the same method, headers and body, at most
///   ``maximumHops`` times per upload. The outcome is the answer to the last
///   request.
/// - **Every other 3xx** comes back to the uploader as the 3xx response, with
///   `retryAfter` nil and a message `redirect to <Location> not followed
///   (<reason>)`: 301, 302 and 303 (they change the method), a redirect to
///   another origin, a missing or unparsable `Location`, and a redirect past
///   the hop limit.
///
/// A redirect alone is never a success: the events stay queued until a
/// collector answers 2xx to a request that carried them.
struct RedirectPolicy: Sendable {
    /// How many redirects one upload follows (requests sent: one more).
    var maximumHops = 3

    /// Follow `location`, or stop and report `message`.
    enum Decision: Sendable, Hashable {
        case follow(URL)
        case stop(message: String)
    }

    /// The decision for a `status` 3xx answer with the `location` header to
    /// a request sent to `url`, after `hops` redirects already followed for
    /// an upload first sent to `original`.
    func decision(status: Int, location: String?, requestURL url: URL, original: URL, hops: Int) -> Decision {
        let trimmed = location?.trimmingCharacters(in: .whitespaces) ?? ""
        guard !trimmed.isEmpty else {
            return .stop(message: Self.message(location: "(none)", reason: "no Location header"))
        }
        guard let target = URL(string: trimmed, relativeTo: url)?.absoluteURL, target.host != nil else {
            return .stop(message: Self.message(location: trimmed, reason: "the Location is not a valid URL"))
        }
        let shown = target.absoluteString
        switch status {
        case 307, 308: break
        case 301, 302, 303:
            return .stop(
                message: Self.message(
                    location: shown,
                    reason: "HTTP \(status) would re-send the upload as a GET without its events; "
                        + "update the collector URL"))
        default:
            return .stop(
                message: Self.message(location: shown, reason: "HTTP \(status) is not a redirect Spool follows"))
        }
        guard let from = Origin(original), let to = Origin(target), from == to else {
            return .stop(message: Self.message(location: shown, reason: "another origin; update the collector URL"))
        }
        guard hops < maximumHops else {
            return .stop(
                message: Self.message(location: shown, reason: "hop limit of \(maximumHops) redirects reached"))
        }
        return .follow(target)
    }

    private static func message(location: String, reason: String) -> String {
        // The Location comes from the server: keep the message short whatever it sends.
        let location = location.count > 200 ? location.prefix(200) + "…" : location
        return "redirect to \(location) not followed (\(reason))"
    }

    /// Scheme, host and port, compared case-insensitively, with the default
    /// port filled in.
    struct Origin: Hashable {
        let scheme: String
        let host: String
        let port: Int

        init?(_ url: URL) {
            guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased(), !host.isEmpty else {
                return nil
            }
            let port: Int
            if let explicit = url.port {
                port = explicit
            } else if scheme == "http" {
                port = 80
            } else if scheme == "https" {
                port = 443
            } else {
                return nil
            }
            self.scheme = scheme
            self.host = host
            self.port = port
        }
    }
}
