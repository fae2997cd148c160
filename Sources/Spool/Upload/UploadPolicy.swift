/// Which networks uploads may use.
public enum UploadPolicy: Sendable, Hashable {
    /// Any network the system offers (the default).
    case always
    /// Only networks the system does not mark as metered: no cellular, no
    /// personal hotspot, not while the user has Low Data Mode on (Apple
    /// platforms, as `NWPathMonitor` reports them). On a metered network
    /// nothing is sent, `flush()` included, and no retry is spent; uploads
    /// start as soon as an unmetered one is there. Where the platform says
    /// nothing of the network (Linux), every network counts as unmetered.
    case unmeteredOnly
}
