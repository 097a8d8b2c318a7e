-- 0006: named credentials kept in the database (`noetl credential set`).
-- One row per name; `ciphertext` is the Fernet token of the whole record (type and data as
-- JSON), encrypted with the key `key_id` names (the first 12 hex digits of its SHA-256);
-- no value is ever stored in clear. `type` is kept in clear so `noetl credential list`
-- can show it without a key. Times are epoch seconds.
-- Mirrors migrations/postgres/0006_credentials.sql.
CREATE TABLE credential (
    name        TEXT PRIMARY KEY,
    type        TEXT NOT NULL,
    ciphertext  TEXT NOT NULL,
    key_id      TEXT NOT NULL,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);
