-- 0006: the collector boundary.
--
-- What Spool learnt about each collector, the last answers it got, and dead
-- letters that can be put back: every upload question ("was event X sent,
-- and what did the collector say?") has an answer here after a restart.

-- One row per collector URL Spool has uploaded to. `gzip_refused_at`: when a
-- gzip body was answered 400 or 415 and the same batch, sent again
-- uncompressed, was accepted (with `compression: .automatic`, requests to
-- this URL are not gzipped from then on); NULL while gzip works.
CREATE TABLE collectors (
    url             TEXT PRIMARY KEY,
    gzip_refused_at REAL
) STRICT;

-- The last requests the uploader sent (at most 1,000 rows, and at most
-- 20,000 events between them; the oldest are deleted first): which events
-- each carried, and what came of it. `event_ids` is a JSON array of the
-- ids of the events, as sent: "was event X sent?" is
-- `WHERE instr(event_ids, 'X') > 0`. `events_before` counts the events of
-- every earlier row (what the 20,000 bound is kept by).
--   outcome: accepted | retried | held_back | bisected | dead_lettered | per_event
--   status:  the HTTP status, NULL when no answer came (then `detail` says why)
CREATE TABLE upload_batches (
    id             INTEGER PRIMARY KEY,
    sent_at        REAL NOT NULL,
    first_seq      INTEGER NOT NULL,
    last_seq       INTEGER NOT NULL,
    first_event_id TEXT NOT NULL,
    last_event_id  TEXT NOT NULL,
    event_count    INTEGER NOT NULL,
    event_ids      TEXT NOT NULL CHECK (json_valid(event_ids)),
    events_before  INTEGER NOT NULL,
    status         INTEGER,
    outcome        TEXT NOT NULL,
    detail         TEXT,
    compressed     INTEGER NOT NULL CHECK (compressed IN (0, 1)),
    body_bytes     INTEGER NOT NULL,
    duration_ms    REAL NOT NULL
) STRICT;

CREATE VIEW upload_batches_readable AS
SELECT id,
       strftime('%Y-%m-%d %H:%M:%f', sent_at, 'unixepoch') AS sent,
       first_seq,
       last_seq,
       event_count,
       status,
       outcome,
       detail,
       first_event_id,
       last_event_id,
       compressed,
       body_bytes,
       round(duration_ms, 1) AS duration_ms
FROM upload_batches;

-- A dead letter put back at the tail of the log (`requeueDeadLetters`) keeps
-- its id, so the collector can deduplicate it; it is for the uploader only:
-- durable listeners already had it and pass over it.
ALTER TABLE events ADD COLUMN uploader_only INTEGER NOT NULL DEFAULT 0 CHECK (uploader_only IN (0, 1));

-- Counts that outlive the rows they count. `dead_letters_evicted_count` and
-- `dead_letters_evicted_age`: dead letters deleted by their bounds
-- (`DeadLetterLimits`).
CREATE TABLE counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL DEFAULT 0
) STRICT;
