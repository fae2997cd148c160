-- 0015: the events each batch read and not yet settled holds, by the
-- position of its first event. A batch read again from the same event — a
-- retry, in this process or another, after a relaunch, or a batch prepared
-- while another was in flight and then discarded — ends at the same event:
-- it carries the same events under the same Idempotency-Key, even when
-- events were recorded after it.
--
-- first_seq: the position of the batch's first event
-- last_seq:  the position of its last event when it was first read
-- Deleted once the uploader's position reaches first_seq (the batch's events
-- are settled, or gone), with the loss counts on erasure and consent
-- withdrawal, and left behind by a salvage (whose positions close up).
CREATE TABLE upload_batch_bounds (
    first_seq INTEGER PRIMARY KEY,
    last_seq  INTEGER NOT NULL CHECK (last_seq >= first_seq)
) STRICT;
