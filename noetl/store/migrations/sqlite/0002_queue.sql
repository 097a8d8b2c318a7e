-- 0002: the task queue, the orchestrator's inbox, the playbook catalog and the workers.
-- JSON columns hold compact JSON text. Times are epoch seconds (REAL) from the database
-- clock, so every process on one file judges leases by the same clock.

-- One row per task id; a retry or a reclaim puts the same row back to 'queued'.
-- lease_token is the fencing token: +1 on every claim, never reset.
CREATE TABLE task_queue (
    task_id          TEXT PRIMARY KEY,
    execution_id     TEXT NOT NULL REFERENCES execution (execution_id) ON DELETE CASCADE,
    step             TEXT NOT NULL,
    pool             TEXT NOT NULL DEFAULT 'default',
    priority         INTEGER NOT NULL DEFAULT 0,
    status           TEXT NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'leased', 'done', 'expired', 'canceled')),
    attempt          INTEGER NOT NULL DEFAULT 1,
    lease_token      INTEGER NOT NULL DEFAULT 0,
    lease_expires_at REAL,
    worker_id        TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    not_before       REAL NOT NULL,
    payload          TEXT NOT NULL,
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL
);

-- claim: WHERE pool = ? AND status = 'queued' AND not_before <= now
--        ORDER BY priority DESC, not_before, rowid (the rowid rides along in the index)
CREATE INDEX task_queue_claim_idx ON task_queue (pool, status, priority DESC, not_before);
-- reap_expired: WHERE status = 'leased' AND lease_expires_at < now
CREATE INDEX task_queue_lease_idx ON task_queue (status, lease_expires_at);

-- Inputs for the orchestrator; a row lives until a commit's inputs_done deletes it.
-- AUTOINCREMENT: ids are never reused, so a late inputs_done cannot delete a newer input.
CREATE TABLE inbox (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id  TEXT NOT NULL REFERENCES execution (execution_id) ON DELETE CASCADE,
    kind          TEXT NOT NULL,
    payload       TEXT NOT NULL DEFAULT '{}',
    created_at    REAL NOT NULL,
    claimed_by    TEXT,
    claimed_until REAL
);

CREATE TABLE playbook (
    path       TEXT NOT NULL,
    version    INTEGER NOT NULL CHECK (version > 0),
    name       TEXT NOT NULL,
    text       TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (path, version)
);

CREATE TABLE worker (
    worker_id    TEXT PRIMARY KEY,
    pool         TEXT NOT NULL,
    hostname     TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    status       TEXT NOT NULL DEFAULT 'running'
                 CHECK (status IN ('running', 'draining', 'stopped')),
    started_at   REAL NOT NULL,
    heartbeat_at REAL NOT NULL
);
