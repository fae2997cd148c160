#!/usr/bin/env python3
"""The test collector's server (collector.py), taking every request and
keeping nothing but its size and event count: for spool-bench's throughput
measurements, where the full collector's validation and copies of each body
would cost more per request than the client it measures.

    python3 lean_collector.py --log FILE [--port N] [--lifetime S] [--delay S]

Prints "PORT <n>" once listening on 127.0.0.1, answers 200 to every request
(after S seconds with --delay, as a collector across a network would), and
appends one JSON line per request to FILE:

    {"t": seconds, "status": 200, "bytes": n on the wire, "events": n}

"events" counts the "id" and "messageId" keys of the body, decoded first
when it is gzipped (0 when it does not decode).
"""
import gzip
import time

import collector


def count_events(wire, headers):
    body = wire
    if headers.get("Content-Encoding") == "gzip":
        try:
            body = gzip.decompress(wire)
        except Exception:
            return 0
    return body.count(b'"id":"') + body.count(b'"messageId":"')


class LeanHandler(collector.Handler):
    def serve(self):
        length = int(self.headers.get("Content-Length") or 0)
        wire = self.rfile.read(length)
        collector.record({"t": time.time(), "status": 200, "bytes": len(wire),
                          "events": count_events(wire, self.headers)})
        if collector.answer_delay > 0:
            # A round trip: requests in flight together wait together.
            time.sleep(collector.answer_delay)
        return self.answer(200)

    do_POST = do_GET = do_PUT = do_PATCH = do_DELETE = serve


if __name__ == "__main__":
    collector.main(LeanHandler)
