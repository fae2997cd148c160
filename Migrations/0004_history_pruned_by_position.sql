-- 0004: event_history is pruned by position, not by a time index.
--
-- Rows are appended in commit order, so their ids grow with time: the
-- oldest rows are the lowest ids. Pruning by age walks from the lowest id
-- until the first row young enough (cost proportional to what it deletes),
-- and a row bound deletes below max(id) - bound. The recorded_at index was
-- only used for pruning, and every commit paid for it (one more B-tree
-- insert per event); EVENT_FREQUENCY rules use (name, recorded_at).
DROP INDEX event_history_by_time;
