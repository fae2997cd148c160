-- 0009: identity changes in the order they were made, and row ids that are
-- never reused.
--
-- The identity in force is the row with the latest `created_at` (the moment
-- the change was made, not when its row was written; the highest `id` breaks
-- a tie). Rows are written on the database queue after the call that made
-- the change, so a change's row can land after a later change's row.
--
-- `identities` and `contexts` take AUTOINCREMENT ids: an id an erasure
-- deleted is never given to another row, so an event another process
-- committed with an id it had cached cannot point at another person's row.
-- `log_head.erasures` counts the erasures of the file: a process that sees
-- it change drops the rows it had cached.

DROP VIEW events_readable;
DROP VIEW identities_readable;

CREATE TABLE identities_new (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    anonymous_id TEXT NOT NULL,
    user_id      TEXT,
    traits       TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(traits)),
    created_at   REAL NOT NULL
) STRICT;
INSERT INTO identities_new (id, anonymous_id, user_id, traits, created_at)
SELECT id, anonymous_id, user_id, traits, created_at FROM identities;
DROP TABLE identities;
ALTER TABLE identities_new RENAME TO identities;
CREATE INDEX identities_by_time ON identities (created_at, id);

CREATE TABLE contexts_new (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    context    TEXT NOT NULL CHECK (json_valid(context)),
    created_at REAL NOT NULL
) STRICT;
INSERT INTO contexts_new (id, context, created_at) SELECT id, context, created_at FROM contexts;
DROP TABLE contexts;
ALTER TABLE contexts_new RENAME TO contexts;

ALTER TABLE log_head ADD COLUMN erasures INTEGER NOT NULL DEFAULT 0;

-- The log with readable dates, each event's type and who it was recorded for.
CREATE VIEW events_readable AS
SELECT e.seq,
       e.id,
       e.type,
       e.name,
       strftime('%Y-%m-%d %H:%M:%f', e.recorded_at, 'unixepoch') AS recorded,
       e.session_id,
       i.user_id,
       i.anonymous_id,
       e.target,
       e.priority,
       e.parameters
FROM events AS e
LEFT JOIN identities AS i ON i.id = e.identity_id;

-- Identity changes with readable dates, the one in force first.
CREATE VIEW identities_readable AS
SELECT id,
       anonymous_id,
       user_id,
       traits,
       strftime('%Y-%m-%d %H:%M:%f', created_at, 'unixepoch') AS created
FROM identities
ORDER BY created_at DESC, id DESC;
