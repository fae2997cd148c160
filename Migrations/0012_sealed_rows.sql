-- 0012: values sealed at rest (`EngineConfiguration.encryption`).
--
-- With encryption configured, the personal part of a row is written to its
-- `sealed` column instead of its readable columns: an event's or a dead
-- letter's parameters, an identity's user id and traits, a context. The
-- readable column then holds JSON `null` (the user id NULL), so `sqlite3`
-- still shows every id, name, type, time and position. Without encryption
-- `sealed` is NULL and the readable columns hold the values.
--
-- A sealed value is: 1 byte format (1), 1 byte key id length, the key id
-- (UTF-8), a 12-byte nonce, the AES-256-GCM ciphertext and its 16-byte tag.
-- The row it belongs to is bound as associated data (an event's id, an
-- identity's or a context's row id), so a value moved to another row does
-- not open.
ALTER TABLE events ADD COLUMN sealed BLOB;
ALTER TABLE dead_letters ADD COLUMN sealed BLOB;
ALTER TABLE identities ADD COLUMN sealed BLOB;
ALTER TABLE contexts ADD COLUMN sealed BLOB;

-- One row once an engine with encryption has opened the file: an engine
-- without encryption then looks for sealed rows before it starts, and
-- refuses the file while any is left.
CREATE TABLE sealing (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    since      REAL NOT NULL
) STRICT;
