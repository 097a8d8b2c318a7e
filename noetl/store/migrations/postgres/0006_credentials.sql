-- 0006: named credentials kept in the database (`noetl credential set`).
-- One row per name; `ciphertext` is the Fernet token of the whole record (type and data as
-- JSON), encrypted with the key `key_id` names (the first 12 hex digits of its SHA-256);
-- no value is ever stored in clear. `type` is kept in clear so `noetl credential list`
-- can show it without a key.
-- Mirrors migrations/sqlite/0006_credentials.sql.
CREATE TABLE credential (
    name        text PRIMARY KEY,
    type        text NOT NULL,
    ciphertext  text NOT NULL,
    key_id      text NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);
