-- 0010: schedules. `schedule` holds every schedule, made by the API/CLI (`source` api) or
-- from a registered playbook's `triggers:` block (`source` playbook); `spec` is the
-- trigger as JSON text. `schedule_tick` holds one row per decided tick: its key
-- (schedule, tick_ms) is what makes a tick start once however many servers look at it
-- (the first INSERT wins). The row records the execution id BEFORE the execution starts,
-- so a server that dies between the claim and the start leaves a `pending` tick another
-- server starts with that same id (an execution id exists once): never lost, never doubled.
-- `token_hash` is the SHA-256 of the token that may start it through its webhook
-- (`POST /api/triggers/{name}`), none until one is made; `token_sealed` the token itself,
-- encrypted with the credentials key (`<key id>:<Fernet token>`), kept only when that key
-- is set, to check HMAC signatures of webhook requests.
-- Mirrors migrations/sqlite/0010_schedules.sql.
CREATE TABLE schedule (
    name           text PRIMARY KEY,
    playbook_path  text NOT NULL,
    source         text NOT NULL,
    spec           text NOT NULL,
    paused         boolean NOT NULL DEFAULT false,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    token_hash     text,
    token_sealed   text
);
CREATE INDEX schedule_playbook_idx ON schedule (playbook_path);

CREATE TABLE schedule_tick (
    schedule       text NOT NULL,
    tick_ms        bigint NOT NULL,
    manual         boolean NOT NULL DEFAULT false,
    status         text NOT NULL,
    execution_id   text,
    owner          text NOT NULL,
    error          text,
    claimed_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (schedule, tick_ms)
);
CREATE INDEX schedule_tick_status_idx ON schedule_tick (status) WHERE status IN ('pending', 'buffered');

-- A webhook's deliveries by their Idempotency-Key: the first request with a key claims it
-- with the execution id it starts; a repeat answers that execution instead of another.
CREATE TABLE schedule_delivery (
    schedule         text NOT NULL,
    idempotency_key  text NOT NULL,
    execution_id     text NOT NULL,
    received_at      timestamptz NOT NULL,
    PRIMARY KEY (schedule, idempotency_key)
);
