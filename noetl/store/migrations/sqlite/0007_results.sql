-- 0007: the result store. A step that selects fields of its result (`result.select`,
-- upstream's `output_select`) keeps the selection in its context and the whole result
-- here, under a reference (`_ref`) that the `artifact` tool reads back. `body` is the
-- result as JSON text; `bytes` its size. Times are epoch seconds.
-- Mirrors migrations/postgres/0007_results.sql.
CREATE TABLE result_store (
    ref           TEXT PRIMARY KEY,
    execution_id  TEXT NOT NULL,
    step          TEXT,
    bytes         INTEGER NOT NULL,
    body          TEXT NOT NULL,
    created_at    REAL NOT NULL
);
CREATE INDEX result_store_execution_idx ON result_store (execution_id);
