-- 0016: with encryption on, an event's target (a group's id, an alias's
-- previous user id) is sealed with its parameters, in `events.sealed` and
-- `dead_letters.sealed`, and the readable `target` column holds NULL. The
-- sealed value's plaintext is then a zero byte, the target's length in
-- bytes (4 bytes, big-endian), its UTF-8 bytes and the parameters' JSON;
-- for an event without a target it is the parameters' JSON alone. No table
-- changes: this step marks files whose sealed values may hold targets,
-- which a library that knows only the steps before it refuses to open.
SELECT 1;
