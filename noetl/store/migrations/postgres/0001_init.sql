-- 0001: executions, their append-only event logs and the step_state projection.
-- Mirrors migrations/sqlite/0001_init.sql: JSON columns are JSONB, times are timestamptz
-- (the adapter hands them out as epoch seconds). Tables go to the first schema of the
-- search_path (`public` unless the DSN sets `options=-csearch_path=...`).

-- The execution row is rewritten on every commit (last_seq), so it holds only small
-- columns; the playbook text and the workload, written once, live in execution_input.
-- `created_order` breaks ties of created_at ("newest first, then by insertion"): SQLite
-- uses its rowid for that, PostgreSQL has none.
CREATE TABLE execution (
    execution_id        text PRIMARY KEY,
    playbook_name       text NOT NULL,
    playbook_path       text,
    status              text NOT NULL DEFAULT 'running'
                        CHECK (status IN ('running', 'ok', 'fail', 'canceled')),
    context             jsonb NOT NULL DEFAULT '{}',
    parent_execution_id text,
    last_seq            bigint NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    finished_at         timestamptz,
    created_order       bigint GENERATED ALWAYS AS IDENTITY
);

CREATE TABLE execution_input (
    execution_id  text PRIMARY KEY REFERENCES execution (execution_id) ON DELETE CASCADE,
    playbook_text text NOT NULL,
    workload      jsonb NOT NULL DEFAULT '{}'
);

CREATE INDEX execution_status_idx ON execution (status, created_at DESC, created_order DESC);
CREATE INDEX execution_created_at_idx ON execution (created_at DESC, created_order DESC);

-- Gapless per execution: the writer locks execution.last_seq in the same transaction.
CREATE TABLE event_log (
    execution_id text NOT NULL REFERENCES execution (execution_id) ON DELETE CASCADE,
    seq          bigint NOT NULL CHECK (seq > 0),
    type         text NOT NULL,
    ts           timestamptz NOT NULL,
    step         text,
    payload      jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (execution_id, seq)
);

CREATE INDEX event_log_type_idx ON event_log (execution_id, type);

-- `created_order` keeps the steps in the order they first appeared (SQLite: rowid).
CREATE TABLE step_state (
    execution_id  text NOT NULL REFERENCES execution (execution_id) ON DELETE CASCADE,
    step          text NOT NULL,
    status        jsonb NOT NULL,
    updated_at    timestamptz NOT NULL,
    created_order bigint GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (execution_id, step)
);
