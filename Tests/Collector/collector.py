#!/usr/bin/env python3
"""A small HTTP collector for Spool's upload tests. Loopback only.

    python3 collector.py --log FILE [--port N]

Prints "PORT <n>" once listening on 127.0.0.1. Every request (any method, any
path other than POST /_control) is answered according to the current mode and
format, and appended to FILE as one JSON line:

    {"t": seconds, "status": code or null, "method": "POST", "path": "/collect",
     "bytes": n on the wire, "decoded_bytes": n after Content-Encoding,
     "raw": base64 of the decoded body, "content_type": ..., "content_encoding": ...,
     "headers": {lower-case name: value},
     "ids": [event ids in the body], "accepted": [ids the collector took],
     "format_errors": [what the body or headers got wrong for the format],
     "loss": {cause: events} the request reports, or null,
     "carrier": where the loss was: "body" (Spool's "spool": {"lost": ...}) | "header"
                (X-Spool-Loss) | null,
     "clock": [{"id", "timestamp", "age", "age_clock", "sent_at",
                "by_age", "by_sent_at"}, one per event]}

"clock" is the collector's correction of each event's time, in seconds
since 1970 on the collector's own clock, taken when the request arrived
("t"): "by_age" = t - age (the event's "age", milliseconds; null without
one), "by_sent_at" = t - (sentAt - timestamp) (the body's "sentAt", or a
Kafka record value's). "age_clock" is "wall" when the device measured the
age on its wall clock, else "monotonic".

The log survives restarts, so a test can stop the collector ("down") and start
it again on the same port.

A gzip body (Content-Encoding: gzip) is decoded first; one that does not
decode is answered 400. Event ids come from the format's place for them:
events[].id (any, spool), batch[].messageId (segment), records[].value.id (kafka).

POST /_control with a JSON object changes the behaviour, and answers
{"held": requests held by mode "hold" right now}:
    {"mode": "ok" | "status" | "redirect" | "hang" | "hold" | "reset" | "accept_lost",
                               # "accept_lost": take the batch, then never answer
                               # (hang_seconds, then close): the answer is lost
     "status": 500,            # with mode "status" or "redirect": answer this code
     "retry_after": "2",       # Retry-After header with a "status" or "path_status" answer
     "location": "http://...", # Location header with a "redirect" answer (null: none)
     "times": 3,               # apply the mode to the next N requests only, then "ok"
     "path_status": {"/other": 503},  # requests to these paths get this status,
                               # whatever the mode, without counting towards "times"
     "reject_ids": [...],      # answer 400 to any batch holding one of these ids
     "lose_ids": {"<id>": 1},  # take a batch holding one of these ids, then lose
                               # its answer as "accept_lost" does, that many times
     "max_bytes": 1000,        # answer 413 to bodies larger than this (decoded)
     "hang_seconds": 5,
     "format": "any" | "spool" | "segment" | "kafka",  # validate and answer as this
                               # collector; "any" (the default) takes any body
     "write_key": "k",         # segment: require Basic auth with this key (else 401)
     "refuse_gzip": true,      # answer 415 to a gzip body...
     "accept_encoding": "identity",  # ...with this Accept-Encoding header (null: none)
     "error_code": 40401,      # kafka: the error envelope's code for a "status" answer
     "kafka_flavor": "confluent" | "redpanda",  # kafka: the 200 body's shape
     "record_errors": {"<id>": {"code": 50003, "times": 1}},  # kafka: per-record
                               # errors in a 200 answer; "times" absent: always
     "plain_json": true,       # read bodies as a hand-written JSON endpoint does:
                               # Content-Encoding ignored, a body that is not JSON
                               # answered 400
     "require_headers": {"x-api-key": "k"},  # answer 401 unless these headers match
     "release": 401}           # answer the requests held by mode "hold" with this
                               # status (mode "hold" waits at most hang_seconds)

Formats are validated as the real collectors document them (required fields
and their types, the auth header, the content type); a body that fails is
answered 400 with the reasons, and the reasons are logged in "format_errors".
"""
import argparse
import base64
import gzip
import json
import re
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from wire import ISO, body_loss, corrections, header_loss

lock = threading.Lock()
state = {"mode": "ok", "status": 500, "retry_after": None, "times": None,
         "reject_ids": set(), "max_bytes": None, "hang_seconds": 5, "location": None,
         "path_status": {}, "format": "any", "write_key": None, "refuse_gzip": False,
         "accept_encoding": None, "error_code": None, "kafka_flavor": "confluent",
         "record_errors": {}, "plain_json": False, "require_headers": {}, "lose_ids": {}}
released = threading.Condition(lock)
release = {"status": None, "held": 0}
# Idempotency-Key values of batches taken: a request carrying one again is
# answered 200 and takes nothing ("duplicate": true in its log line).
taken_keys = set()
offsets = {"next": 0}
log_path = None

SEGMENT_MAX_REQUEST = 500_000
SEGMENT_MAX_MESSAGE = 32_000
SEGMENT_MAX_EVENTS = 2_500
KAFKA_CONTENT_TYPE = "application/vnd.kafka.json.v2+json"
KAFKA_ACCEPT = "application/vnd.kafka.v2+json"


def retry_after(settings):
    """The Retry-After header of a "status" or "path_status" answer, if set."""
    value = settings["retry_after"]
    return {"Retry-After": str(value)} if value is not None else {}


def record(entry):
    with lock:
        with open(log_path, "a") as log:
            log.write(json.dumps(entry) + "\n")


# --- What each format's body must hold -------------------------------------

MESSAGE_TYPES = ("track", "screen", "identify", "group", "alias")


def check_spool_event(event, where, errors, record_value=False):
    """Spool's event object; a Kafka record's value carries sentAt too."""
    if not isinstance(event, dict):
        errors.append(where + " is not an object")
        return None
    keys = set(event)
    required = {"id", "type", "name", "timestamp", "age", "session", "parameters"}
    if record_value:
        required.add("sentAt")
    optional = {"anonymousId", "userId", "target", "context", "ageClock"}
    if not required <= keys or not keys <= required | optional:
        errors.append("%s has keys %s" % (where, sorted(keys)))
    if not isinstance(event.get("age"), int) or isinstance(event.get("age"), bool):
        errors.append(where + ".age is not an integer")
    if "ageClock" in event and event["ageClock"] != "wall":
        errors.append(where + ".ageClock is not \"wall\"")
    if record_value and (not isinstance(event.get("sentAt"), str) or not ISO.match(event.get("sentAt"))):
        errors.append(where + ".sentAt is not ISO 8601 with milliseconds in UTC")
    if event.get("type") not in MESSAGE_TYPES:
        errors.append(where + ".type is not a message type")
    for key in ("anonymousId", "userId", "target"):
        if key in event and not isinstance(event[key], str):
            errors.append("%s.%s is not a string" % (where, key))
    if "context" in event and not isinstance(event["context"], dict):
        errors.append(where + ".context is not an object")
    if not isinstance(event.get("id"), str) or not event.get("id"):
        errors.append(where + ".id is not a string")
    if not isinstance(event.get("name"), str) or not event.get("name"):
        errors.append(where + ".name is not a string")
    if not isinstance(event.get("timestamp"), str) or not ISO.match(event.get("timestamp")):
        errors.append(where + ".timestamp is not ISO 8601 with milliseconds in UTC")
    if event.get("session") is not None and not isinstance(event.get("session"), str):
        errors.append(where + ".session is neither a string nor null")
    if not isinstance(event.get("parameters"), dict):
        errors.append(where + ".parameters is not an object")
    return event.get("id")


def check_spool(body, headers, errors):
    if not (headers.get("content-type") or "").startswith("application/json"):
        errors.append("Content-Type is not application/json")
    if not isinstance(body, dict) or not isinstance(body.get("events"), list):
        errors.append("no events array")
        return []
    if not isinstance(body.get("sentAt"), str) or not ISO.match(body["sentAt"]):
        errors.append("sentAt is not ISO 8601 with milliseconds in UTC")
    if body_loss(body, errors) is None:
        errors.append("no spool.lost object")
    return [check_spool_event(e, "events[%d]" % i, errors) for i, e in enumerate(body["events"])]


def check_segment(body, headers, decoded, errors):
    """Segment's HTTP Tracking API batch, as RudderStack and Jitsu read it too."""
    if not (headers.get("content-type") or "").startswith("application/json"):
        errors.append("Content-Type is not application/json")
    if len(decoded) > SEGMENT_MAX_REQUEST:
        errors.append("request over 500 KB")
    if not isinstance(body, dict) or not isinstance(body.get("batch"), list):
        errors.append("no batch array")
        return []
    if len(body["batch"]) > SEGMENT_MAX_EVENTS:
        errors.append("more than 2500 events")
    if not isinstance(body.get("sentAt"), str) or not ISO.match(body["sentAt"]):
        errors.append("sentAt is not ISO 8601 with milliseconds in UTC")
    ids = []
    for index, item in enumerate(body["batch"]):
        where = "batch[%d]" % index
        if not isinstance(item, dict):
            errors.append(where + " is not an object")
            ids.append(None)
            continue
        if len(json.dumps(item, separators=(",", ":")).encode()) > SEGMENT_MAX_MESSAGE:
            errors.append(where + " over 32 KB")
        # What each call of Segment's HTTP Tracking API requires.
        kind = item.get("type")
        if kind not in MESSAGE_TYPES:
            errors.append(where + ".type is not a message type")
        if kind == "track" and (not isinstance(item.get("event"), str) or not item.get("event")):
            errors.append(where + ".event is not a string")
        if kind == "screen" and not isinstance(item.get("name"), str):
            errors.append(where + ".name is not a string")
        if kind in ("track", "screen") and not isinstance(item.get("properties"), dict):
            errors.append(where + ".properties is not an object")
        if kind in ("identify", "group") and not isinstance(item.get("traits"), dict):
            errors.append(where + ".traits is not an object")
        if kind == "group" and (not isinstance(item.get("groupId"), str) or not item.get("groupId")):
            errors.append(where + ".groupId is not a string")
        if kind == "alias" and (not isinstance(item.get("previousId"), str) or not item.get("previousId")):
            errors.append(where + ".previousId is not a string")
        if kind == "alias" and not isinstance(item.get("userId"), str):
            errors.append(where + ".userId is not a string (alias)")
        message_id = item.get("messageId")
        if not isinstance(message_id, str) or not message_id or len(message_id) >= 100:
            errors.append(where + ".messageId is not a string under 100 characters")
        if not isinstance(item.get("timestamp"), str) or not ISO.match(item.get("timestamp")):
            errors.append(where + ".timestamp is not ISO 8601 with milliseconds in UTC")
        if not isinstance(item.get("anonymousId"), str) and not isinstance(item.get("userId"), str):
            errors.append(where + " has neither anonymousId nor userId (no_user_anon_id)")
        for key in ("anonymousId", "userId"):
            if key in item and not isinstance(item[key], str):
                errors.append("%s.%s is not a string" % (where, key))
        context = item.get("context")
        if context is not None and not isinstance(context, dict):
            errors.append(where + ".context is not an object")
        elif context and "sessionId" in context and not isinstance(context["sessionId"], str):
            errors.append(where + ".context.sessionId is not a string")
        ids.append(message_id)
    return ids


def segment_write_key(headers):
    """The write key, read as rudder-server does (Basic auth, key as the user
    name, empty password); None when the header is missing or malformed."""
    value = headers.get("authorization") or ""
    if not value.startswith("Basic "):
        return None
    try:
        decoded = base64.b64decode(value[6:], validate=True).decode()
    except Exception:
        return None
    user, colon, password = decoded.partition(":")
    return user if colon and password == "" else None


def check_kafka(body, headers, errors):
    """Confluent REST Proxy v2 / Redpanda pandaproxy: POST /topics/<topic>."""
    if headers.get("content-type") != KAFKA_CONTENT_TYPE:
        errors.append("Content-Type is not " + KAFKA_CONTENT_TYPE)
    if KAFKA_ACCEPT not in (headers.get("accept") or ""):
        errors.append("Accept does not ask for " + KAFKA_ACCEPT)
    if not isinstance(body, dict) or not isinstance(body.get("records"), list):
        errors.append("no records array")
        return []
    if not body["records"]:
        errors.append("records may not be empty")
    ids = []
    for index, record_ in enumerate(body["records"]):
        where = "records[%d]" % index
        if not isinstance(record_, dict) or set(record_) != {"key", "value"}:
            errors.append(where + " is not {key, value}")
            ids.append(None)
            continue
        if record_["key"] is not None and not isinstance(record_["key"], str):
            errors.append(where + ".key is neither a string nor null")
        value = record_["value"]
        ids.append(check_spool_event(value, where + ".value", errors, record_value=True))
        if isinstance(value, dict) and record_["key"] not in (
                value.get("session"), value.get("userId") or value.get("anonymousId")):
            errors.append(where + ".key is neither the session id nor the user's id")
    return ids


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # Headers and body go out in separate writes; without this, Nagle and
        # delayed ACKs add 40 ms to every keep-alive request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args):
        pass

    def answer(self, status, body=b"", headers=None, content_type="text/plain"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def kafka_error(self, status, code, message, headers=None):
        body = json.dumps({"error_code": code, "message": message}).encode()
        return self.answer(status, body, headers, KAFKA_ACCEPT)

    def serve(self):
        length = int(self.headers.get("Content-Length") or 0)
        wire = self.rfile.read(length)
        if self.command == "POST" and self.path == "/_control":
            update = json.loads(wire or b"{}")
            with lock:
                if "reject_ids" in update:
                    update["reject_ids"] = set(update["reject_ids"])
                if "release" in update:
                    release["status"] = update.pop("release")
                    released.notify_all()
                state.update(update)
                held = release["held"]
            return self.answer(200, json.dumps({"held": held}).encode(), content_type="application/json")

        with lock:
            path_status = state["path_status"].get(self.path)
            mode = state["mode"]
            if path_status is not None:
                pass  # a fixed answer for this path; "times" is for the mode
            elif state["times"] is not None:
                if state["times"] <= 0:
                    mode = state["mode"] = "ok"
                    state["times"] = None
                else:
                    state["times"] -= 1
            settings = dict(state)
            settings["reject_ids"] = set(state["reject_ids"])

        headers = {key.lower(): value for key, value in self.headers.items()}
        encoding = headers.get("content-encoding")
        decoded, undecodable = wire, False
        if encoding == "gzip" and not settings["refuse_gzip"] and settings["format"] != "kafka" \
                and not settings["plain_json"]:
            try:
                decoded = gzip.decompress(wire)
            except Exception:
                undecodable = True
        fmt = settings["format"]
        errors = []
        try:
            body = json.loads(decoded)
        except Exception:
            body = None
        if body is None:
            ids = []
        elif fmt == "segment":
            ids = check_segment(body, headers, decoded, errors)
        elif fmt == "kafka":
            ids = check_kafka(body, headers, errors)
        elif fmt == "spool":
            ids = check_spool(body, headers, errors)
        else:
            events = body.get("events") if isinstance(body, dict) else None
            ids = [e.get("id") for e in events if isinstance(e, dict)] if isinstance(events, list) else []
        ids = [i for i in ids if isinstance(i, str)]
        received = time.time()
        loss, carrier = header_loss(headers, errors), "header"
        if isinstance(body, dict) and isinstance(body.get("spool"), dict):
            if loss is not None:
                errors.append("the loss both in the body and in X-Spool-Loss")
            loss, carrier = body_loss(body, errors), "body"
        if fmt in ("segment", "kafka") and loss is None:
            errors.append("no X-Spool-Loss header")
        entry = {"t": received, "bytes": len(wire), "decoded_bytes": len(decoded), "ids": ids,
                 "accepted": [], "raw": base64.b64encode(decoded).decode(),
                 "method": self.command, "content_type": headers.get("content-type"),
                 "content_encoding": encoding, "headers": headers, "path": self.path,
                 "format_errors": [], "loss": loss, "carrier": carrier if loss is not None else None,
                 "clock": corrections(fmt, body, received)}

        def finish(status, errors_=None):
            entry["status"] = status
            entry["format_errors"] = errors_ or []
            record(entry)

        if path_status is not None:
            finish(path_status)
            return self.answer(path_status, b"path status", retry_after(settings))
        if mode == "reset":
            finish(None)
            # Close with RST: SO_LINGER with a zero timeout.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
            return
        if mode == "hang":
            finish(None)
            time.sleep(settings["hang_seconds"])
            self.close_connection = True
            return
        if mode == "hold":
            # Held until a test releases it with a status (bounded).
            with lock:
                release["status"] = None
                release["held"] += 1
                released.wait_for(lambda: release["status"] is not None, timeout=settings["hang_seconds"])
                release["held"] -= 1
                status = release["status"]
            if status is None:
                finish(None)
                self.close_connection = True
                return
            if 200 <= status < 300:
                self.take(entry, ids, headers)
            finish(status)
            return self.answer(status, b"released")
        if mode == "redirect":
            finish(settings["status"])
            headers_ = {"Location": settings["location"]} if settings["location"] is not None else {}
            return self.answer(settings["status"], b"moved", headers_)
        if encoding == "gzip" and settings["refuse_gzip"]:
            # RFC 7694: 415, and Accept-Encoding says which codings would do.
            finish(415)
            accept = settings["accept_encoding"]
            return self.answer(415, b"unsupported content encoding",
                               {"Accept-Encoding": accept} if accept is not None else {})
        if encoding == "gzip" and fmt == "kafka":
            # Confluent's proxy reads the gzip bytes as JSON (kafka-rest#829).
            finish(400, ["a gzip body, which Confluent's proxy cannot read"])
            return self.kafka_error(400, 400, "Illegal character ((CTRL-CHAR, code 31))")
        if settings["plain_json"] and body is None:
            finish(400, ["not JSON (a plain endpoint reads no Content-Encoding)"])
            return self.answer(400, b"Bad Request: invalid JSON")
        required = settings["require_headers"]
        if any(headers.get(name.lower()) != value for name, value in required.items()):
            finish(401)
            return self.answer(401, b"Unauthorized")
        if undecodable:
            finish(400, ["Content-Encoding gzip, but the body is not gzip"])
            return self.answer(400, b"invalid gzip")
        if fmt == "segment" and settings["write_key"] is not None:
            key = segment_write_key(headers)
            body_key = body.get("writeKey") if isinstance(body, dict) else None
            if key != settings["write_key"] or body_key != settings["write_key"]:
                finish(401, ["write key: header %r, body %r" % (key, body_key)])
                return self.answer(401, b"Invalid Write Key")
        if settings["max_bytes"] is not None and len(decoded) > settings["max_bytes"]:
            finish(413)
            return self.answer(413, b"Request size exceeds max limit")
        if fmt != "any" and (body is None or errors):
            finish(400, errors or ["not JSON"])
            if fmt == "kafka":
                return self.kafka_error(422, 422, "; ".join(errors or ["not JSON"]))
            return self.answer(400, ("Invalid JSON: " + "; ".join(errors or ["not JSON"])).encode())
        rejected = [i for i in ids if i in settings["reject_ids"]]
        if rejected:
            finish(400)
            return self.answer(400, ("rejected event " + ",".join(rejected)).encode())
        if mode == "status":
            finish(settings["status"])
            if fmt == "kafka":
                code = settings["error_code"] or settings["status"] * 100 + 1
                return self.kafka_error(settings["status"], code, "collector says no", retry_after(settings))
            return self.answer(settings["status"], b"collector says no", retry_after(settings))
        if fmt == "kafka":
            return self.kafka_produce(entry, ids, settings)
        self.take(entry, ids, headers)
        with lock:
            losing = [i for i in ids if state["lose_ids"].get(i, 0) > 0]
            for event_id in losing:
                state["lose_ids"][event_id] -= 1
        if losing:
            entry["answer_lost"] = True
        finish(200)
        if mode == "accept_lost" or losing:
            time.sleep(settings["hang_seconds"])
            self.close_connection = True
            return
        if fmt == "segment":
            return self.answer(200, b'{"success":true}', content_type="application/json")
        return self.answer(200, b"{}")

    @staticmethod
    def take(entry, ids, headers):
        """Takes the request's events, unless its Idempotency-Key was taken."""
        key = headers.get("idempotency-key")
        with lock:
            duplicate = key is not None and key in taken_keys
            if key is not None:
                taken_keys.add(key)
        if duplicate:
            entry["duplicate"] = True
        else:
            entry["accepted"] = [i for i in ids if i is not None]

    def kafka_produce(self, entry, ids, settings):
        """A 200 with one offsets entry per record, errors per record."""
        results = []
        with lock:
            for event_id in ids:
                failure = state["record_errors"].get(event_id)
                if failure is not None and failure.get("times") is not None:
                    if failure["times"] <= 0:
                        failure = None
                    else:
                        state["record_errors"][event_id]["times"] -= 1
                if failure is None:
                    offset = offsets["next"]
                    offsets["next"] += 1
                    entry["accepted"].append(event_id)
                    if settings["kafka_flavor"] == "redpanda":
                        results.append({"partition": 0, "offset": offset})
                    else:
                        results.append({"partition": 0, "offset": offset, "error_code": None, "error": None})
                elif settings["kafka_flavor"] == "redpanda":
                    results.append({"partition": 0, "offset": -1, "error_code": failure["code"]})
                else:
                    results.append({"partition": None, "offset": None, "error_code": failure["code"],
                                    "error": "record failed with %d" % failure["code"]})
        entry["status"] = 200
        record(entry)
        if settings["kafka_flavor"] == "redpanda":
            body = {"offsets": results}
        else:
            body = {"key_schema_id": None, "value_schema_id": None, "offsets": results}
        return self.answer(200, json.dumps(body).encode(), content_type=KAFKA_ACCEPT)

    # Any method: a redirect followed as a GET is logged too, so a test sees
    # it arrive.
    do_POST = do_GET = do_PUT = do_PATCH = do_DELETE = serve


# Seconds the lean server waits before each answer (--delay).
answer_delay = 0.0


def main(handler=None):
    """Serves with `handler` (default: Handler) until --lifetime ends."""
    global log_path
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--lifetime", type=float, default=600, help="exit after this many seconds")
    parser.add_argument("--delay", type=float, default=0,
                        help="lean server: seconds it waits before each answer (a round trip)")
    arguments = parser.parse_args()
    log_path = arguments.log
    global answer_delay
    answer_delay = arguments.delay
    ThreadingHTTPServer.allow_reuse_address = True
    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer(("127.0.0.1", arguments.port), handler or Handler)
    print("PORT %d" % server.server_address[1], flush=True)
    # Stop by itself even if the test that started it is gone.
    timer = threading.Timer(arguments.lifetime, server.shutdown)
    timer.daemon = True
    timer.start()
    server.serve_forever()


if __name__ == "__main__":
    main()
