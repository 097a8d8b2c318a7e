-- 0004: the dead-letter queue (seed 000, 8.6). One row per task that failed for good,
-- keyed by the task's ORIGINAL id (message_id), so a replay keeps every correlation; a
-- replayed task that fails again updates its row (status back to pending).
-- Mirrors migrations/sqlite/0004_dlq.sql.
CREATE TABLE dlq (
    message_id      text PRIMARY KEY,
    execution_id    text NOT NULL REFERENCES execution (execution_id) ON DELETE CASCADE,
    step_id         text NOT NULL,
    loop_index      integer,
    loop_key        jsonb,
    tool_kind       text,
    sink_id         text,
    attempts        integer NOT NULL,
    reason          text NOT NULL,
    error_type      text,
    last_error      text NOT NULL,
    last_stack      text,
    first_seen      timestamptz NOT NULL,
    last_seen       timestamptz NOT NULL,
    payload         jsonb NOT NULL,           -- the task, redacted, for people to read
    context_excerpt text NOT NULL DEFAULT '', -- the end of its context, redacted
    task            jsonb NOT NULL,           -- the task as dispatched, for the replay
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'replayed', 'discarded')),
    replays         integer NOT NULL DEFAULT 0,
    discard_reason  text,
    updated_at      timestamptz NOT NULL
);

CREATE INDEX dlq_execution_idx ON dlq (execution_id);
CREATE INDEX dlq_status_idx ON dlq (status, last_seen DESC);
CREATE INDEX dlq_tool_kind_idx ON dlq (tool_kind);
