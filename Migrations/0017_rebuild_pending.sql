-- 0017: rebuild_pending: one row from the transaction of an erasure, or
-- the start of `reencryptAll()`, until the file is rebuilt without the
-- deleted rows' bytes (the WAL checkpointed and truncated, the file
-- vacuumed). A row left means the rebuild did not finish: the process was
-- killed, or another process held the WAL past the busy timeout. The next
-- start finishes the rebuild and deletes the row.
CREATE TABLE rebuild_pending (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    since REAL NOT NULL
) STRICT;
