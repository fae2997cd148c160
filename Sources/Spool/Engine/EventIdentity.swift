import Foundation
import SpoolStorage

/// The kind of message an event is, as Segment's and RudderStack's APIs name
/// them. ``EventEngine/record(_:parameters:)`` records a `track`.
public enum EventType: String, Sendable, Hashable, CaseIterable {
    /// Something the user did (``EventEngine/record(_:parameters:)``).
    case track
    /// A screen the user saw (``EventEngine/screen(_:properties:)``).
    case screen
    /// Who the user is (``EventEngine/identify(userId:traits:)``).
    case identify
    /// A group, account or organisation the user belongs to
    /// (``EventEngine/group(_:traits:)``).
    case group
    /// A new user id for the same person (``EventEngine/alias(_:)``).
    case alias
}

/// Who events are recorded for: the identity in force when `record`
/// accepted each one, kept with it until it is uploaded.
public struct SpoolIdentity: Sendable, Hashable {
    /// An id for this installation: a UUID made once and kept in the
    /// database, shared by every process using the file, new after
    /// ``EventEngine/reset()`` and ``EventEngine/eraseAllData()``.
    public let anonymousId: String
    /// The signed-in user, if any.
    public let userId: String?
    /// What ``EventEngine/identify(userId:traits:)`` said about the user.
    public let traits: [String: EventValue]

    init(_ row: IdentityRow) {
        anonymousId = row.anonymousID
        userId = row.userID
        // try?: Spool encoded the traits, so they read back; traits another
        // program wrote unreadably read as none here and stay in the row.
        traits = (try? JSONReader.parseObject(row.traitsJSON)) ?? [:]
    }
}

/// Where events are recorded: app, device, operating system, locale and
/// custom values, set with ``EventEngine/setContext(_:)`` and referenced by
/// each event recorded after it.
///
/// A format decides where it goes: Segment's `context`, or the `context`
/// object of Spool's format. Spool writes `library` itself.
public struct EventContext: Sendable, Hashable {
    /// The app: `name`, `version`, `build`, `namespace` (its bundle id).
    public var app: [String: EventValue]
    /// The device: `manufacturer`, `model`, `type`…
    public var device: [String: EventValue]
    /// The operating system: `name`, `version`.
    public var os: [String: EventValue]
    /// A locale identifier (`"en-US"`).
    public var locale: String?
    /// A time zone identifier (`"Europe/Paris"`).
    public var timezone: String?
    /// Anything else, written beside the keys above (which win on a clash).
    public var custom: [String: EventValue]

    /// A context; every part is optional.
    public init(
        app: [String: EventValue] = [:], device: [String: EventValue] = [:], os: [String: EventValue] = [:],
        locale: String? = nil, timezone: String? = nil, custom: [String: EventValue] = [:]
    ) {
        self.app = app
        self.device = device
        self.os = os
        self.locale = locale
        self.timezone = timezone
        self.custom = custom
    }

    /// What the process can tell about itself: the app's name, version,
    /// build and bundle id (from the main bundle), the operating system's
    /// name and version, the current locale and time zone, and `custom`.
    public static func current(custom: [String: EventValue] = [:]) -> EventContext {
        var app: [String: EventValue] = [:]
        let info = Bundle.main.infoDictionary ?? [:]
        if let name = info["CFBundleName"] as? String { app["name"] = .string(name) }
        if let version = info["CFBundleShortVersionString"] as? String { app["version"] = .string(version) }
        if let build = info["CFBundleVersion"] as? String { app["build"] = .string(build) }
        if let namespace = Bundle.main.bundleIdentifier { app["namespace"] = .string(namespace) }
        return EventContext(
            app: app,
            os: [
                "name": .string(SystemPlatform.operatingSystemName),
                "version": .string(SystemPlatform.operatingSystemVersion),
            ],
            locale: Locale.current.identifier.replacingOccurrences(of: "_", with: "-"),
            timezone: TimeZone.current.identifier, custom: custom)
    }

    /// The JSON object the formats write.
    func encoded() throws(SpoolError) -> String {
        var object = custom
        if !app.isEmpty { object["app"] = .object(app) }
        if !device.isEmpty { object["device"] = .object(device) }
        if !os.isEmpty { object["os"] = .object(os) }
        if let locale { object["locale"] = .string(locale) }
        if let timezone { object["timezone"] = .string(timezone) }
        return try EventEncoder.encode(object)
    }
}
