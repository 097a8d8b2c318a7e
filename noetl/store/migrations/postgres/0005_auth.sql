-- 0005: API tokens and login sessions.
-- api_token: one row per token; only the SHA-256 digest of the token is kept (token_hash).
-- session: the revisions of each session (the database session store), keyed by the
-- digest of the session token; the last few revisions of a session are kept, a logout
-- is a 'delete' revision.
-- Mirrors migrations/sqlite/0005_auth.sql.
CREATE TABLE api_token (
    token_id     text PRIMARY KEY,
    name         text NOT NULL,
    role         text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    token_hash   text NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL,
    last_used_at timestamptz,
    expires_at   timestamptz,
    revoked      boolean NOT NULL DEFAULT false,
    revoked_at   timestamptz
);

CREATE TABLE session (
    session_key      text NOT NULL,
    revision         integer NOT NULL,
    operation        text NOT NULL CHECK (operation IN ('put', 'delete')),
    token_id         text NOT NULL,
    role             text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    created_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    last_activity_at timestamptz NOT NULL,
    client           text,
    written_at       timestamptz NOT NULL,
    PRIMARY KEY (session_key, revision)
);

CREATE INDEX session_expires_idx ON session (expires_at);
