-- 0005: event_history counts occurrences per event name and millisecond.
--
-- One row per event made the history cost as much as the event itself: a
-- row and an index entry written with every event, and once past the row
-- bound one of each deleted with every event too (together about a third of
-- the writer's time in a burst, which then fell behind one recording
-- thread). A row now stands for every occurrence of one name within one
-- millisecond: `recorded_at` is that millisecond (the occurrence's time
-- rounded down, so it is never later than the event), `occurrences` how
-- many there were. An app recording now and then still writes one row per
-- event; a burst writes one per name and millisecond. Counts over a time
-- window are exact to the millisecond; ids still grow with time, so pruning
-- still walks up from the lowest id.
CREATE TABLE event_history_counts (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    recorded_at REAL NOT NULL,
    occurrences INTEGER NOT NULL DEFAULT 1 CHECK (occurrences > 0)
) STRICT;

INSERT INTO event_history_counts (name, recorded_at, occurrences)
SELECT name,
       -- recorded_at rounded down to its millisecond (CAST truncates toward
       -- zero, so below zero one more is taken off).
       (CAST(recorded_at * 1000 AS INTEGER)
        - (recorded_at * 1000 < CAST(recorded_at * 1000 AS INTEGER))) / 1000.0 AS millisecond,
       count(*)
FROM event_history
GROUP BY name, millisecond
ORDER BY min(id);

DROP TABLE event_history;
ALTER TABLE event_history_counts RENAME TO event_history;

-- The writer adds to a millisecond's row when it exists (an upsert on this
-- key); EVENT_FREQUENCY rules sum over (name, recorded_at) ranges.
CREATE UNIQUE INDEX event_history_by_name_time ON event_history (name, recorded_at);
