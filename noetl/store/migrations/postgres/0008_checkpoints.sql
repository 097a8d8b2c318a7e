-- 0008: the checkpoint store. A task that runs in parts (a pipeline's tasks, run by one
-- worker) keeps how far it got, one row per task id, so its next attempt resumes there.
-- `attempt` is the attempt that wrote it: a save by an earlier attempt never replaces it.
-- `body` is the progress as JSON text (ASCII: a NUL is the escape `\u0000`).
-- Mirrors migrations/sqlite/0008_checkpoints.sql.
CREATE TABLE task_checkpoint (
    task_id       text PRIMARY KEY,
    execution_id  text NOT NULL,
    attempt       integer NOT NULL,
    body          text NOT NULL,
    updated_at    timestamptz NOT NULL
);
CREATE INDEX task_checkpoint_execution_idx ON task_checkpoint (execution_id);
