-- 0017: rebuild_pending: one row from the transaction of an erasure, or
-- the start of `reencryptAll()`, until the file is rebuilt without the
-- deleted rows' bytes (the WAL checkpointed and truncated, the file
-- vacuumed). `owner` is the engine rebuilding it (a lease owner,
-- `pid <n> #<hex>`), NULL once its rebuild failed. A row left means the
-- rebuild did not finish: its process was killed, or another process held
-- the WAL past the busy timeout. The next start finishes a row whose owner
-- is NULL or no longer running, and deletes it.
CREATE TABLE rebuild_pending (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    since REAL NOT NULL,
    owner TEXT
) STRICT;
