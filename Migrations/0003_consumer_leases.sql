-- 0003: consumer leases. Several processes may share this file (an app and
-- its extensions). Each consumer — the uploader, a durable listener — is run
-- by one process at a time: the one named in lease_owner, until
-- lease_expires (seconds since 1970). An expired lease is free again, so a
-- process killed while holding one blocks the others for at most one lease
-- period. A consumer's position is only ever read and advanced inside a
-- transaction, never trusted from memory.

ALTER TABLE consumers ADD COLUMN lease_owner TEXT;
ALTER TABLE consumers ADD COLUMN lease_expires REAL NOT NULL DEFAULT 0;

-- consumer_lag: pending comes from positions (the log has no gaps after a
-- consumer's position), so the view answers at once at any backlog; the
-- lease shows which process runs the consumer and until when.
DROP VIEW consumer_lag;
CREATE VIEW consumer_lag AS
SELECT c.id AS consumer,
       c.position,
       max(0, (SELECT last_seq FROM log_head) - c.position) AS pending,
       (SELECT strftime('%Y-%m-%d %H:%M:%f', e.recorded_at, 'unixepoch')
          FROM events AS e WHERE e.seq > c.position ORDER BY e.seq LIMIT 1) AS oldest_pending,
       c.dropped,
       c.lease_owner,
       CASE WHEN c.lease_owner IS NULL THEN NULL
            ELSE strftime('%Y-%m-%d %H:%M:%f', c.lease_expires, 'unixepoch') END AS lease_until,
       strftime('%Y-%m-%d %H:%M:%f', c.updated_at, 'unixepoch') AS updated
FROM consumers AS c;
