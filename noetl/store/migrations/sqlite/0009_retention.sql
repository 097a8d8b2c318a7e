-- 0009: retention (`noetl db prune`, the server's retention job). A finished execution
-- older than the cutoff loses its history (queue rows, inputs, events, step states,
-- results, checkpoints) and keeps a tombstone: its execution row, with `pruned_at` set
-- and its context emptied, so asking for it says when its history went.
-- `token_floor` is the highest fencing token its deleted queue rows had: a task of it
-- queued again starts there, so a lease taken before the prune stays fenced off.
-- Mirrors migrations/postgres/0009_retention.sql.
ALTER TABLE execution ADD COLUMN pruned_at REAL;
ALTER TABLE execution ADD COLUMN token_floor INTEGER NOT NULL DEFAULT 0;

-- What a prune looks for: finished executions not pruned yet, oldest first.
CREATE INDEX execution_prunable_idx ON execution (finished_at)
    WHERE pruned_at IS NULL AND status <> 'running';
-- Dead letters an operator settled (replayed, discarded), by age.
CREATE INDEX dlq_settled_idx ON dlq (updated_at) WHERE status <> 'pending';
-- A prune deletes by execution: task_queue and inbox have no index on it here.
CREATE INDEX task_queue_execution_idx ON task_queue (execution_id);
CREATE INDEX inbox_execution_idx ON inbox (execution_id);
