-- 0011: uploads paused by the app (`pauseUploads()`), for every process
-- using the file and across launches.
--
-- One row while uploads are paused, none otherwise. Recording, listeners,
-- the history and the queue's bounds go on; no process sends a request (or
-- hands one to the system) until `resumeUploads()` deletes the row.
CREATE TABLE upload_pause (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    paused_at REAL NOT NULL
) STRICT;
