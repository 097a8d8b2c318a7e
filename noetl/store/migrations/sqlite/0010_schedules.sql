-- 0010: schedules. `schedule` holds every schedule, made by the API/CLI (`source` api) or
-- from a registered playbook's `triggers:` block (`source` playbook); `spec` is the
-- trigger as JSON text. `schedule_tick` holds one row per decided tick: its key
-- (schedule, tick_ms) is what makes a tick start once however many processes look at it
-- (the first INSERT wins). The row records the execution id BEFORE the execution starts,
-- so a process that dies between the claim and the start leaves a `pending` tick another
-- starts with that same id (an execution id exists once). Times are epoch seconds.
-- `token_hash` is the SHA-256 of the token that may start it through its webhook
-- (`POST /api/triggers/{name}`), none until one is made; `token_sealed` the token itself,
-- encrypted with the credentials key (`<key id>:<Fernet token>`), kept only when that key
-- is set, to check HMAC signatures of webhook requests.
-- Mirrors migrations/postgres/0010_schedules.sql.
CREATE TABLE schedule (
    name           TEXT PRIMARY KEY,
    playbook_path  TEXT NOT NULL,
    source         TEXT NOT NULL,
    spec           TEXT NOT NULL,
    paused         INTEGER NOT NULL DEFAULT 0,
    created_at     REAL NOT NULL,
    updated_at     REAL NOT NULL,
    token_hash     TEXT,
    token_sealed   TEXT
);
CREATE INDEX schedule_playbook_idx ON schedule (playbook_path);

CREATE TABLE schedule_tick (
    schedule       TEXT NOT NULL,
    tick_ms        INTEGER NOT NULL,
    manual         INTEGER NOT NULL DEFAULT 0,
    status         TEXT NOT NULL,
    execution_id   TEXT,
    owner          TEXT NOT NULL,
    error          TEXT,
    claimed_at     REAL NOT NULL,
    updated_at     REAL NOT NULL,
    PRIMARY KEY (schedule, tick_ms)
);
CREATE INDEX schedule_tick_status_idx ON schedule_tick (status) WHERE status IN ('pending', 'buffered');

-- A webhook's deliveries by their Idempotency-Key: the first request with a key claims it
-- with the execution id it starts; a repeat answers that execution instead of another.
CREATE TABLE schedule_delivery (
    schedule         TEXT NOT NULL,
    idempotency_key  TEXT NOT NULL,
    execution_id     TEXT NOT NULL,
    received_at      REAL NOT NULL,
    PRIMARY KEY (schedule, idempotency_key)
);
