-- 0014: what the collector is told beside the events — the loss the device
-- counted, and the clock each event's age is measured on.
--
-- Loss: every event the uploader lost before sending it is counted here, by
-- cause, in the transaction that lost it (in any process using the file).
-- The next request reports what is counted; a count comes off only in the
-- transaction that settles a request the collector accepted, by what that
-- request carried, so a refused request loses nothing and what was counted
-- meanwhile stays.
--
-- cause:  queue_count | queue_bytes | queue_age (the queue's bounds),
--         free_space (the bounds the free-space guard froze),
--         dead_lettered, salvaged, wal_lost
-- events: counted and not yet reported in an accepted request (a row at
--         zero is deleted)
CREATE TABLE upload_loss (
    cause  TEXT PRIMARY KEY,
    events INTEGER NOT NULL CHECK (events >= 0)
) STRICT;

-- What a request not yet settled carries, by the position of its first
-- event: every request that starts there carries these counts (a retry
-- too, in any process), and no other request carries them as well.
CREATE TABLE upload_loss_carried (
    first_seq INTEGER NOT NULL,
    cause     TEXT NOT NULL,
    events    INTEGER NOT NULL CHECK (events > 0),
    PRIMARY KEY (first_seq, cause)
) STRICT;

-- The clock of each event's age: `launch` numbers the engine start that
-- recorded it (counters.launches), `launch_ms` is when, in milliseconds on
-- that launch's monotonic clock from the launch's start (negative for events
-- recorded before start()). NULL: recorded without a monotonic clock (or
-- before this migration); its age is then the wall clock's.
ALTER TABLE events ADD COLUMN launch INTEGER;
ALTER TABLE events ADD COLUMN launch_ms INTEGER;
