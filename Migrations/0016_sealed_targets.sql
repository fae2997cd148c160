-- 0016: with encryption on, an event's target (a group's id, an alias's
-- previous user id) is sealed with its parameters, in `events.sealed` and
-- `dead_letters.sealed`, and the readable `target` column holds NULL. The
-- sealed value's plaintext is then a zero byte, the target's length in
-- bytes (4 bytes, big-endian), its UTF-8 bytes and the parameters' JSON;
-- for an event without a target it is the parameters' JSON alone. A library
-- that knows only the steps before this one refuses such files.
--
-- sealed_targets_pending: one row while rows sealed before this step may
-- hold their target readable beside the sealed value. The next start with
-- encryption seals those targets with their parameters and deletes the row.
--
-- sealing.key_id: the key `reencryptAll()` made current, in any process
-- (NULL before the first). An engine sealing with another key asks its key
-- provider for the current key again at its next commit.
ALTER TABLE sealing ADD COLUMN key_id TEXT;

CREATE TABLE sealed_targets_pending (
    id INTEGER PRIMARY KEY CHECK (id = 1)
) STRICT;

INSERT INTO sealed_targets_pending (id)
SELECT 1 WHERE EXISTS (SELECT 1 FROM events WHERE target IS NOT NULL AND sealed IS NOT NULL)
    OR EXISTS (SELECT 1 FROM dead_letters WHERE target IS NOT NULL AND sealed IS NOT NULL);
