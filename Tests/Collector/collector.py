#!/usr/bin/env python3
"""A small HTTP collector for Spool's upload tests. Loopback only.

    python3 collector.py --log FILE [--port N]

Prints "PORT <n>" once listening on 127.0.0.1. Every request (any method, any
path other than POST /_control) is answered according to the current mode and
appended to FILE as one JSON line: {"t": seconds, "status": code or null,
"bytes": n, "ids": [event ids], "body": parsed body or null, "raw": base64 body,
"method": "POST", "path": "/collect", "content_type": header or null}. The log
survives restarts, so a test can stop the collector ("down") and start it again
on the same port.

POST /_control with a JSON object changes the behaviour:
    {"mode": "ok" | "status" | "redirect" | "hang" | "reset",
     "status": 500,            # with mode "status" or "redirect": answer this code
     "retry_after": "2",       # Retry-After header with a "status" or "path_status" answer
     "location": "http://...", # Location header with a "redirect" answer (null: none)
     "times": 3,               # apply the mode to the next N requests only, then "ok"
     "path_status": {"/other": 503},  # requests to these paths get this status,
                               # whatever the mode, without counting towards "times"
     "reject_ids": [...],      # answer 400 to any batch holding one of these ids
     "max_bytes": 1000,        # answer 413 to bodies larger than this
     "hang_seconds": 5}
"""
import argparse
import base64
import json
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
state = {"mode": "ok", "status": 500, "retry_after": None, "times": None,
         "reject_ids": set(), "max_bytes": None, "hang_seconds": 5, "location": None,
         "path_status": {}}
log_path = None


def record(entry):
    with lock:
        with open(log_path, "a") as log:
            log.write(json.dumps(entry) + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # Headers and body go out in separate writes; without this, Nagle and
        # delayed ACKs add 40 ms to every keep-alive request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args):
        pass

    def answer(self, status, body=b"", headers=None):
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def serve(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.command == "POST" and self.path == "/_control":
            update = json.loads(raw or b"{}")
            with lock:
                if "reject_ids" in update:
                    update["reject_ids"] = set(update["reject_ids"])
                state.update(update)
            return self.answer(200, b"ok")

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
            reject = set(state["reject_ids"])
            max_bytes = state["max_bytes"]
            status = state["status"]
            retry_after = state["retry_after"]
            hang = state["hang_seconds"]
            location = state["location"]
        try:
            body = json.loads(raw)
            ids = [event.get("id") for event in body.get("events", [])]
        except Exception:
            body, ids = None, []
        entry = {"t": time.time(), "bytes": len(raw), "ids": ids, "body": body,
                 "raw": base64.b64encode(raw).decode(), "method": self.command,
                 "content_type": self.headers.get("Content-Type"), "path": self.path}

        if path_status is not None:
            entry["status"] = path_status
            record(entry)
            headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
            return self.answer(path_status, b"path status", headers)
        if mode == "reset":
            entry["status"] = None
            record(entry)
            # Close with RST: SO_LINGER with a zero timeout.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
            return
        if mode == "hang":
            entry["status"] = None
            record(entry)
            time.sleep(hang)
            self.close_connection = True
            return
        if max_bytes is not None and len(raw) > max_bytes:
            entry["status"] = 413
            record(entry)
            return self.answer(413, b"payload too large")
        rejected = [i for i in ids if i in reject]
        if rejected:
            entry["status"] = 400
            record(entry)
            return self.answer(400, ("rejected event " + ",".join(rejected)).encode())
        if mode == "redirect":
            entry["status"] = status
            record(entry)
            headers = {"Location": location} if location is not None else {}
            return self.answer(status, b"moved", headers)
        if mode == "status":
            entry["status"] = status
            record(entry)
            headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
            return self.answer(status, b"collector says no", headers)
        entry["status"] = 200
        record(entry)
        return self.answer(200, b"{}")

    # Any method: a redirect followed as a GET is logged too, so a test sees
    # it arrive.
    do_POST = do_GET = do_PUT = do_PATCH = do_DELETE = serve


def main():
    global log_path
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--lifetime", type=float, default=600, help="exit after this many seconds")
    arguments = parser.parse_args()
    log_path = arguments.log
    ThreadingHTTPServer.allow_reuse_address = True
    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer(("127.0.0.1", arguments.port), Handler)
    print("PORT %d" % server.server_address[1], flush=True)
    # Stop by itself even if the test that started it is gone.
    timer = threading.Timer(arguments.lifetime, server.shutdown)
    timer.daemon = True
    timer.start()
    server.serve_forever()


if __name__ == "__main__":
    main()
