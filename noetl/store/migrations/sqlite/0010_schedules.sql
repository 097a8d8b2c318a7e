-- 0010: schedules. `schedule` holds every schedule, made by the API/CLI (`source` api) or
-- from a registered playbook's `triggers:` block (`source` playbook); `spec` is the
-- trigger as JSON text. `schedule_tick` holds one row per decided tick: its key
-- (schedule, tick_ms) is what makes a tick start once however many processes look at it
-- (the first INSERT wins). The row records the execution id BEFORE the execution starts,
-- so a process that dies between the claim and the start leaves a `pending` tick another
-- starts with that same id (an execution id exists once). Times are epoch seconds.
-- Mirrors migrations/postgres/0010_schedules.sql.
CREATE TABLE schedule (
    name           TEXT PRIMARY KEY,
    playbook_path  TEXT NOT NULL,
    source         TEXT NOT NULL,
    spec           TEXT NOT NULL,
    paused         INTEGER NOT NULL DEFAULT 0,
    created_at     REAL NOT NULL,
    updated_at     REAL NOT NULL
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
