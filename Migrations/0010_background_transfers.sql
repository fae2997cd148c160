-- 0010: uploads handed to the system's background transfer service.
--
-- With background transfers on, a batch due while the app is in the
-- background is written to a file and handed to a background URLSession,
-- which sends it while the app is suspended or not running. One row per
-- batch handed off and not yet settled: its events stay queued (the
-- uploader's position does not move) until the system reports the answer,
-- in this launch or after a relaunch, and the row is deleted in the same
-- transaction that settles them, so a hand-off is never settled twice.
-- Every send of these events, by the system or by the app itself after
-- `resend_after` with no report, carries `batch_id` as its Idempotency-Key
-- and the bytes of `body_file`.
CREATE TABLE background_transfers (
    batch_id     TEXT PRIMARY KEY,
    -- The background session's identifier the batch was handed to.
    session      TEXT NOT NULL,
    first_seq    INTEGER NOT NULL,
    last_seq     INTEGER NOT NULL,
    -- The log positions the body carries, as a JSON array, in log order.
    positions    TEXT NOT NULL CHECK (json_valid(positions)),
    event_count  INTEGER NOT NULL CHECK (event_count > 0),
    -- The body's file name, in the directory beside the database named
    -- `<database file>-transfers`.
    body_file    TEXT NOT NULL,
    compressed   INTEGER NOT NULL CHECK (compressed IN (0, 1)),
    handed_at    REAL NOT NULL,
    -- How many times these events were sent, by the system or the app.
    sends        INTEGER NOT NULL DEFAULT 1,
    -- 'handed_off': with the system, no report yet; 'failed': the last send
    -- got no delivery (see last_report), sent again by the next upload.
    state        TEXT NOT NULL DEFAULT 'handed_off' CHECK (state IN ('handed_off', 'failed')),
    last_report  TEXT
) STRICT;
CREATE INDEX background_transfers_by_position ON background_transfers (first_seq);
