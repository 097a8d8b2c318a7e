-- 0008: the checkpoint store. A task that runs in parts (a pipeline's tasks, run by one
-- worker) keeps how far it got, one row per task id, so its next attempt resumes there.
-- `attempt` is the attempt that wrote it: a save by an earlier attempt never replaces it.
-- `body` is the progress as JSON text. Times are epoch seconds.
-- Mirrors migrations/postgres/0008_checkpoints.sql.
CREATE TABLE task_checkpoint (
    task_id       TEXT PRIMARY KEY,
    execution_id  TEXT NOT NULL,
    attempt       INTEGER NOT NULL,
    body          TEXT NOT NULL,
    updated_at    REAL NOT NULL
);
CREATE INDEX task_checkpoint_execution_idx ON task_checkpoint (execution_id);
