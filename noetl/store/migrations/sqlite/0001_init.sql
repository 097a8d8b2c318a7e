-- 0001: executions, their append-only event logs and the step_state projection.
-- JSON columns hold compact JSON text. Times are epoch seconds (REAL).

-- The execution row is rewritten on every commit (last_seq), so it holds only small
-- columns; the playbook text and the workload, written once, live in execution_input.
CREATE TABLE execution (
    execution_id        TEXT PRIMARY KEY,
    playbook_name       TEXT NOT NULL,
    playbook_path       TEXT,
    status              TEXT NOT NULL DEFAULT 'running'
                        CHECK (status IN ('running', 'ok', 'fail', 'canceled')),
    context             TEXT NOT NULL DEFAULT '{}',
    parent_execution_id TEXT,
    last_seq            INTEGER NOT NULL DEFAULT 0,
    created_at          REAL NOT NULL,
    updated_at          REAL NOT NULL,
    finished_at         REAL
);

CREATE TABLE execution_input (
    execution_id  TEXT PRIMARY KEY REFERENCES execution (execution_id) ON DELETE CASCADE,
    playbook_text TEXT NOT NULL,
    workload      TEXT NOT NULL DEFAULT '{}'
);

CREATE INDEX execution_status_idx ON execution (status);
CREATE INDEX execution_created_at_idx ON execution (created_at);

-- Gapless per execution: the writer checks execution.last_seq in the same transaction.
CREATE TABLE event_log (
    execution_id TEXT NOT NULL REFERENCES execution (execution_id) ON DELETE CASCADE,
    seq          INTEGER NOT NULL CHECK (seq > 0),
    type         TEXT NOT NULL,
    ts           REAL NOT NULL,
    step         TEXT,
    payload      TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (execution_id, seq)
);

CREATE INDEX event_log_type_idx ON event_log (execution_id, type);

CREATE TABLE step_state (
    execution_id TEXT NOT NULL REFERENCES execution (execution_id) ON DELETE CASCADE,
    step         TEXT NOT NULL,
    status       TEXT NOT NULL,
    updated_at   REAL NOT NULL,
    PRIMARY KEY (execution_id, step)
);
