-- 0002: the log's retention bound. When the log holds more events than the
-- configured maximum, the oldest give way even if a consumer has not finished
-- them; that consumer's position jumps past them and `dropped` counts them,
-- so the loss is visible instead of silent. `dropped_reported` is how many of
-- those a durable listener has already been told about.

ALTER TABLE consumers ADD COLUMN dropped INTEGER NOT NULL DEFAULT 0;
ALTER TABLE consumers ADD COLUMN dropped_reported INTEGER NOT NULL DEFAULT 0;

DROP VIEW consumer_lag;
CREATE VIEW consumer_lag AS
SELECT c.id AS consumer,
       c.position,
       (SELECT count(*) FROM events AS e WHERE e.seq > c.position) AS pending,
       (SELECT strftime('%Y-%m-%d %H:%M:%f', e.recorded_at, 'unixepoch')
          FROM events AS e WHERE e.seq > c.position ORDER BY e.seq LIMIT 1) AS oldest_pending,
       c.dropped,
       strftime('%Y-%m-%d %H:%M:%f', c.updated_at, 'unixepoch') AS updated
FROM consumers AS c;
