-- 0001: the event log, consumer positions, event history, dead letters, and
-- the views people use at the sqlite3 CLI. Times are REAL seconds since 1970.

-- Every migration the library applied, in order (PRAGMA user_version mirrors
-- the highest one).
CREATE TABLE schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at REAL NOT NULL
) STRICT;

-- The append-only event log: one row per accepted event, in the order the
-- appends were accepted. The writer assigns seq from log_head (below), so
-- positions are never reused after the log is emptied and a consumer's
-- position never points past new events. There is deliberately no index on
-- id: seq is the key, and lookups by id are rare (a collector deduplicates on
-- it, Spool does not).
CREATE TABLE events (
    seq         INTEGER PRIMARY KEY,
    id          TEXT NOT NULL,
    name        TEXT NOT NULL,
    parameters  TEXT NOT NULL CHECK (json_valid(parameters)),
    recorded_at REAL NOT NULL,
    session_id  TEXT,
    priority    INTEGER NOT NULL DEFAULT 0 CHECK (priority IN (0, 1))
) STRICT;

-- The highest log position ever assigned, updated once per commit. One row.
CREATE TABLE log_head (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    last_seq INTEGER NOT NULL
) STRICT;
INSERT INTO log_head (id, last_seq) VALUES (1, 0);

-- One row per consumer of the log (the uploader, each durable listener): the
-- last position it finished. Events at or below every position are deleted.
CREATE TABLE consumers (
    id         TEXT PRIMARY KEY,
    position   INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL
) STRICT;

-- The user's event history for survey trigger rules. Not the upload queue:
-- rows stay after upload and are pruned by age.
CREATE TABLE event_history (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    recorded_at REAL NOT NULL
) STRICT;
CREATE INDEX event_history_by_name_time ON event_history (name, recorded_at);
CREATE INDEX event_history_by_time ON event_history (recorded_at);

-- Events a collector refused for good, kept with the reason instead of being
-- deleted.
CREATE TABLE dead_letters (
    seq         INTEGER PRIMARY KEY,
    id          TEXT NOT NULL,
    name        TEXT NOT NULL,
    parameters  TEXT NOT NULL,
    recorded_at REAL NOT NULL,
    session_id  TEXT,
    status      INTEGER,
    reason      TEXT NOT NULL,
    failed_at   REAL NOT NULL
) STRICT;

-- Events each consumer has not finished yet, with readable UTC dates.
CREATE VIEW pending_events AS
SELECT c.id AS consumer,
       e.seq,
       e.id AS event_id,
       e.name,
       strftime('%Y-%m-%d %H:%M:%f', e.recorded_at, 'unixepoch') AS recorded,
       e.session_id,
       e.parameters
FROM consumers AS c
JOIN events AS e ON e.seq > c.position;

-- How far behind each consumer is.
CREATE VIEW consumer_lag AS
SELECT c.id AS consumer,
       c.position,
       (SELECT count(*) FROM events AS e WHERE e.seq > c.position) AS pending,
       (SELECT strftime('%Y-%m-%d %H:%M:%f', e.recorded_at, 'unixepoch')
          FROM events AS e WHERE e.seq > c.position ORDER BY e.seq LIMIT 1) AS oldest_pending,
       strftime('%Y-%m-%d %H:%M:%f', c.updated_at, 'unixepoch') AS updated
FROM consumers AS c;

-- The log with readable dates.
CREATE VIEW events_readable AS
SELECT seq,
       id,
       name,
       strftime('%Y-%m-%d %H:%M:%f', recorded_at, 'unixepoch') AS recorded,
       session_id,
       priority,
       parameters
FROM events;

-- Dead letters with readable dates.
CREATE VIEW dead_letters_readable AS
SELECT seq,
       id,
       name,
       status,
       reason,
       strftime('%Y-%m-%d %H:%M:%f', recorded_at, 'unixepoch') AS recorded,
       strftime('%Y-%m-%d %H:%M:%f', failed_at, 'unixepoch') AS failed,
       parameters
FROM dead_letters;
