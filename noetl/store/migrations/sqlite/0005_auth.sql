-- 0005: API tokens and login sessions.
-- api_token: one row per token; only the SHA-256 digest of the token is kept (token_hash).
-- session: the revisions of each session (the database session store), keyed by the
-- digest of the session token; the last few revisions of a session are kept, a logout
-- is a 'delete' revision. Times are epoch seconds.
-- Mirrors migrations/postgres/0005_auth.sql.
CREATE TABLE api_token (
    token_id     TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    role         TEXT NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    token_hash   TEXT NOT NULL UNIQUE,
    created_at   REAL NOT NULL,
    last_used_at REAL,
    expires_at   REAL,
    revoked      INTEGER NOT NULL DEFAULT 0 CHECK (revoked IN (0, 1)),
    revoked_at   REAL
);

CREATE TABLE session (
    session_key      TEXT NOT NULL,
    revision         INTEGER NOT NULL,
    operation        TEXT NOT NULL CHECK (operation IN ('put', 'delete')),
    token_id         TEXT NOT NULL,
    role             TEXT NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    created_at       REAL NOT NULL,
    expires_at       REAL NOT NULL,
    last_activity_at REAL NOT NULL,
    client           TEXT,
    written_at       REAL NOT NULL,
    PRIMARY KEY (session_key, revision)
);

CREATE INDEX session_expires_idx ON session (expires_at);
