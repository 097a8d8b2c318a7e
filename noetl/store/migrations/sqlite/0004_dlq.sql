-- 0004: the dead-letter queue (seed 000, 8.6). One row per task that failed for good,
-- keyed by the task's ORIGINAL id (message_id), so a replay keeps every correlation; a
-- replayed task that fails again updates its row (status back to pending).
-- JSON columns hold compact JSON text; times are epoch seconds.
-- Mirrors migrations/postgres/0004_dlq.sql.
CREATE TABLE dlq (
    message_id      TEXT PRIMARY KEY,
    execution_id    TEXT NOT NULL REFERENCES execution (execution_id) ON DELETE CASCADE,
    step_id         TEXT NOT NULL,
    loop_index      INTEGER,
    loop_key        TEXT,
    tool_kind       TEXT,
    sink_id         TEXT,
    attempts        INTEGER NOT NULL,
    reason          TEXT NOT NULL,
    error_type      TEXT,
    last_error      TEXT NOT NULL,
    last_stack      TEXT,
    first_seen      REAL NOT NULL,
    last_seen       REAL NOT NULL,
    payload         TEXT NOT NULL,
    context_excerpt TEXT NOT NULL DEFAULT '',
    task            TEXT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'replayed', 'discarded')),
    replays         INTEGER NOT NULL DEFAULT 0,
    discard_reason  TEXT,
    updated_at      REAL NOT NULL
);

CREATE INDEX dlq_execution_idx ON dlq (execution_id);
CREATE INDEX dlq_status_idx ON dlq (status, last_seen DESC);
CREATE INDEX dlq_tool_kind_idx ON dlq (tool_kind);
