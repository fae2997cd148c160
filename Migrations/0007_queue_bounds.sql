-- 0007: the queue's byte and age bounds.
--
-- Beside the count bound, the log can be bounded by the bytes its events
-- take and by their age; the oldest give way first, as with the count.
-- What the log holds in bytes is known from two numbers, whatever the
-- backlog: `log_head.bytes_total`, the bytes (name + parameters, UTF-8) of
-- every event ever appended, and the oldest row's `bytes_before`, the bytes
-- of every event appended before it. Rows are only ever deleted from the
-- oldest end, so the difference is what the log holds.

ALTER TABLE events ADD COLUMN bytes_before INTEGER NOT NULL DEFAULT 0;
ALTER TABLE log_head ADD COLUMN bytes_total INTEGER NOT NULL DEFAULT 0;

-- The events already queued: their running total, in log order.
UPDATE events SET bytes_before = running.before
FROM (SELECT seq,
             coalesce(sum(length(CAST(name AS BLOB)) + length(CAST(parameters AS BLOB)))
                 OVER (ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
      FROM events) AS running
WHERE running.seq = events.seq;

UPDATE log_head SET bytes_total =
    (SELECT coalesce(sum(length(CAST(name AS BLOB)) + length(CAST(parameters AS BLOB))), 0) FROM events);

-- What the queue bounds dropped, by bound (`counters`): dropped_count,
-- dropped_bytes, dropped_age.
