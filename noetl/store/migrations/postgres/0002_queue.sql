-- 0002: the task queue, the orchestrator's inbox, the playbook catalog and the workers
-- (distributed mode). Mirrors migrations/sqlite/0002_queue.sql.

-- One row per task id; a retry or a reclaim puts the same row back to 'queued'.
-- lease_token is the fencing token: +1 on every claim, never reset. `queue_order` breaks
-- ties of the claim order (priority, not_before) by insertion (SQLite: its rowid).
CREATE TABLE task_queue (
    task_id          text PRIMARY KEY,
    execution_id     text NOT NULL REFERENCES execution (execution_id) ON DELETE CASCADE,
    step             text NOT NULL,
    pool             text NOT NULL DEFAULT 'default',
    priority         integer NOT NULL DEFAULT 0,
    status           text NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'leased', 'done', 'expired', 'canceled')),
    attempt          integer NOT NULL DEFAULT 1,
    lease_token      bigint NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    worker_id        text,
    cancel_requested boolean NOT NULL DEFAULT false,
    not_before       timestamptz NOT NULL DEFAULT now(),
    payload          jsonb NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    queue_order      bigint GENERATED ALWAYS AS IDENTITY
);

-- The claim reads only queued rows of one pool, best first; the reaper only leased rows.
CREATE INDEX task_queue_claim_idx ON task_queue (pool, priority DESC, not_before, queue_order)
    WHERE status = 'queued';
CREATE INDEX task_queue_lease_idx ON task_queue (lease_expires_at) WHERE status = 'leased';
CREATE INDEX task_queue_execution_idx ON task_queue (execution_id);

-- Inputs for the orchestrators (outcomes, cancel requests, expired leases); a row lives
-- until a commit's inputs_done deletes it. Ids are never reused, so a late inputs_done
-- cannot delete a newer input.
CREATE TABLE inbox (
    id            bigserial PRIMARY KEY,
    execution_id  text NOT NULL REFERENCES execution (execution_id) ON DELETE CASCADE,
    kind          text NOT NULL,
    payload       jsonb NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    claimed_by    text,
    claimed_until timestamptz
);

-- Deleting an execution cascades here.
CREATE INDEX inbox_execution_idx ON inbox (execution_id);

CREATE TABLE playbook (
    path       text NOT NULL,
    version    integer NOT NULL CHECK (version > 0),
    name       text NOT NULL,
    text       text NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (path, version)
);

CREATE TABLE worker (
    worker_id    text PRIMARY KEY,
    pool         text NOT NULL,
    hostname     text NOT NULL,
    pid          integer NOT NULL,
    status       text NOT NULL DEFAULT 'running'
                 CHECK (status IN ('running', 'draining', 'stopped')),
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL
);
