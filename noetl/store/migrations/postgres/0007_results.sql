-- 0007: the result store. A step that selects fields of its result (`result.select`,
-- upstream's `output_select`) keeps the selection in its context and the whole result
-- here, under a reference (`_ref`) that the `artifact` tool reads back. `body` is the
-- result as JSON text (NUL escaped as in every JSON column); `bytes` its size.
-- Mirrors migrations/sqlite/0007_results.sql.
CREATE TABLE result_store (
    ref           text PRIMARY KEY,
    execution_id  text NOT NULL,
    step          text,
    bytes         bigint NOT NULL,
    body          text NOT NULL,
    created_at    timestamptz NOT NULL
);
CREATE INDEX result_store_execution_idx ON result_store (execution_id);
