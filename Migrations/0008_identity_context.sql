-- 0008: who and where each event was recorded for, and what kind of message
-- it is.
--
-- Identity and context are stored once per change, in a row each event
-- references; an event keeps the row in force when `record` accepted it,
-- whatever changes before it is uploaded.

-- One row per identity change (identify, reset, alias, the first start).
-- The newest row is the identity in force, for every process on the file.
CREATE TABLE identities (
    id           INTEGER PRIMARY KEY,
    anonymous_id TEXT NOT NULL,
    user_id      TEXT,
    traits       TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(traits)),
    created_at   REAL NOT NULL
) STRICT;

-- One row per context a process set (app, device, os, locale, custom values),
-- as the JSON object the formats write.
CREATE TABLE contexts (
    id         INTEGER PRIMARY KEY,
    context    TEXT NOT NULL CHECK (json_valid(context)),
    created_at REAL NOT NULL
) STRICT;

-- type:        track | screen | identify | group | alias
-- target:      the group id of a `group`, the previous id of an `alias`
-- identity_id: the identities row in force when the event was recorded
--              (NULL for events recorded before this migration)
-- context_id:  the contexts row in force, NULL when none was set
ALTER TABLE events ADD COLUMN type TEXT NOT NULL DEFAULT 'track'
    CHECK (type IN ('track', 'screen', 'identify', 'group', 'alias'));
ALTER TABLE events ADD COLUMN target TEXT;
ALTER TABLE events ADD COLUMN identity_id INTEGER;
ALTER TABLE events ADD COLUMN context_id INTEGER;

ALTER TABLE dead_letters ADD COLUMN type TEXT NOT NULL DEFAULT 'track';
ALTER TABLE dead_letters ADD COLUMN target TEXT;
ALTER TABLE dead_letters ADD COLUMN identity_id INTEGER;
ALTER TABLE dead_letters ADD COLUMN context_id INTEGER;

-- The log with readable dates, each event's type and who it was recorded for.
DROP VIEW events_readable;
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

-- Identity changes with readable dates.
CREATE VIEW identities_readable AS
SELECT id,
       anonymous_id,
       user_id,
       traits,
       strftime('%Y-%m-%d %H:%M:%f', created_at, 'unixepoch') AS created
FROM identities;
