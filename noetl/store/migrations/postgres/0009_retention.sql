-- 0009: retention (`noetl db prune`, the server's retention job). A finished execution
-- older than the cutoff loses its history (queue rows, inputs, events, step states,
-- results, checkpoints) and keeps a tombstone: its execution row, with `pruned_at` set
-- and its context emptied, so asking for it says when its history went.
-- `token_floor` is the highest fencing token its deleted queue rows had: a task of it
-- queued again starts there, so a lease taken before the prune stays fenced off.
-- Mirrors migrations/sqlite/0009_retention.sql.
ALTER TABLE execution ADD COLUMN pruned_at timestamptz;
ALTER TABLE execution ADD COLUMN token_floor bigint NOT NULL DEFAULT 0;

-- What a prune looks for: finished executions not pruned yet, oldest first.
CREATE INDEX execution_prunable_idx ON execution (finished_at)
    WHERE pruned_at IS NULL AND status <> 'running';
-- Dead letters an operator settled (replayed, discarded), by age.
CREATE INDEX dlq_settled_idx ON dlq (updated_at) WHERE status <> 'pending';
-- Every table a prune deletes from is indexed by execution_id already (a primary key's
-- first column, or an index of 0001-0008).
