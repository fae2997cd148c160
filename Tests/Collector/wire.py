"""What a Spool request reports beside its events, as the test collector
reads it (imported by collector.py): the loss the device counted, and each
event's time corrected to the collector's clock."""
import datetime
import re

ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")

LOSS_CAUSES = ("queue_count", "queue_bytes", "queue_age", "free_space", "dead_lettered", "salvaged", "wal_lost")


def check_loss(counts, where, errors):
    if set(counts) != set(LOSS_CAUSES) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts.values()):
        errors.append("%s is not a count for each of %s: %r" % (where, ", ".join(LOSS_CAUSES), counts))
    return counts


def body_loss(body, errors):
    """Spool's body: {"spool": {"lost": {cause: events}}}."""
    spool = body.get("spool") if isinstance(body, dict) else None
    lost = spool.get("lost") if isinstance(spool, dict) else None
    return check_loss(lost, "spool.lost", errors) if isinstance(lost, dict) else None


def header_loss(headers, errors):
    """X-Spool-Loss: an RFC 8941 dictionary of integers, `cause=n, ...`."""
    value = headers.get("x-spool-loss")
    if value is None:
        return None
    counts = {}
    for member in value.split(","):
        key, equals, number = member.strip().partition("=")
        if not equals or not re.fullmatch(r"[a-z*][a-z0-9_.*-]*", key) or not re.fullmatch(r"-?\d{1,15}", number):
            errors.append("X-Spool-Loss is not a dictionary of integers: %r" % value)
            return None
        counts[key] = int(number)
    return check_loss(counts, "X-Spool-Loss", errors)


def seconds(text):
    """An ISO 8601 time with milliseconds in UTC, as seconds since 1970."""
    if not isinstance(text, str) or not ISO.match(text):
        return None
    moment = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.replace(tzinfo=datetime.timezone.utc).timestamp()


def corrections(fmt, body, received):
    """Each event's time on the collector's clock (see the module's doc)."""
    if not isinstance(body, dict):
        return []
    if isinstance(body.get("records"), list):
        items = [(r.get("value"), None) for r in body["records"] if isinstance(r, dict)]
    elif isinstance(body.get("batch"), list):
        items = [(e, body.get("sentAt")) for e in body["batch"]]
    elif isinstance(body.get("events"), list):
        items = [(e, body.get("sentAt")) for e in body["events"]]
    else:
        return []
    clock = []
    for event, sent_at in items:
        if not isinstance(event, dict):
            continue
        timestamp, sent = seconds(event.get("timestamp")), seconds(event.get("sentAt", sent_at))
        age = event.get("age") if isinstance(event.get("age"), int) else None
        clock.append({
            "id": event.get("id", event.get("messageId")), "timestamp": timestamp, "age": age,
            "age_clock": event.get("ageClock", "monotonic") if age is not None else None, "sent_at": sent,
            "by_age": received - age / 1000 if age is not None else None,
            "by_sent_at": received - (sent - timestamp) if sent is not None and timestamp is not None else None,
        })
    return clock
