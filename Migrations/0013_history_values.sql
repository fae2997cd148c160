-- 0013: event_history_values keeps the event properties that survey
-- filters read.
--
-- A survey declares, when it is registered, which properties of which
-- events its filters read. While it is registered, the writer adds each
-- such value of a recorded event here, in the event's own transaction,
-- counted per event name, property, value and millisecond as event_history
-- counts occurrences: a burst adds to a few rows. Only strings, numbers,
-- Booleans (1 or 0) and dates (their ISO 8601 text) are kept; a property
-- the event lacks, or holds null, an array or an object, adds nothing. Ids
-- grow with time, so pruning walks up from the lowest id, as it does for
-- event_history; filters read (name, property, value, recorded_at) ranges.
CREATE TABLE event_history_values (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    property    TEXT NOT NULL,
    value       ANY NOT NULL CHECK (typeof(value) IN ('integer', 'real', 'text')),
    recorded_at REAL NOT NULL,
    occurrences INTEGER NOT NULL DEFAULT 1 CHECK (occurrences > 0)
) STRICT;

CREATE UNIQUE INDEX event_history_values_by_value
    ON event_history_values (name, property, value, recorded_at);
