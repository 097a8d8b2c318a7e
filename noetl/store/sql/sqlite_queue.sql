-- The SQLite store's own statements (noetl.store.queries): the writes of a commit,
-- the task queue and the inbox, run by noetl.store.sqlite, _sqlite_queue and _sqlite_dlq.
-- Positional parameters (? or ?N); every write runs in the caller's BEGIN IMMEDIATE
-- transaction, timed by the store's clock (given as a parameter).

-- The newest version of a playbook, checked by a start that took one for the latest.
-- name: newest_version
SELECT max(version) FROM playbook WHERE path = :path

-- name: insert_execution
INSERT INTO execution (execution_id, playbook_name, playbook_path, status, context,
                       parent_execution_id, last_seq, created_at, updated_at, finished_at)
VALUES (:execution_id, :playbook_name, :playbook_path, :status, :context,
        :parent_execution_id, :last_seq, :created_at, :updated_at, :finished_at)

-- name: insert_execution_input
INSERT INTO execution_input (execution_id, playbook_text, compiled)
VALUES (:execution_id, :playbook_text, :compiled)

-- name: select_last_seq
SELECT last_seq FROM execution WHERE execution_id = ?

-- name: insert_event
INSERT INTO event_log (execution_id, seq, type, ts, step, payload) VALUES (?, ?, ?, ?, ?, ?)

-- An append that changes the status (update_execution) or not (advance_execution): SQLite
-- rewrites the index entries of every column a SET names, changed or not, so the
-- common case names neither status nor finished_at (their indexes stay untouched).
-- name: update_execution
UPDATE execution SET
    last_seq = :last_seq,
    updated_at = :now,
    status = :status,
    finished_at = :finished_at,
    context = COALESCE(:context, context)
WHERE execution_id = :execution_id AND last_seq = :expected_seq

-- name: advance_execution
UPDATE execution SET
    last_seq = :last_seq,
    updated_at = :now,
    context = COALESCE(:context, context)
WHERE execution_id = :execution_id AND last_seq = :expected_seq

-- name: upsert_step
INSERT INTO step_state (execution_id, step, status, updated_at) VALUES (?, ?, ?, ?)
ON CONFLICT (execution_id, step) DO UPDATE SET
    status = excluded.status, updated_at = excluded.updated_at

-- ?1 task_id ?2 execution_id ?3 step ?4 pool ?5 priority ?6 attempt ?7 payload ?8 delay ?9 now
-- Enqueueing an id again (a step run again) reuses the row and keeps its lease_token, so
-- the fencing token still only grows and a holder of an older lease stays fenced off. A
-- new row starts at its execution's token_floor (the highest token of its rows a prune
-- deleted), so that holds across a prune too.
-- name: enqueue
INSERT INTO task_queue (
    task_id, execution_id, step, pool, priority, status, attempt, lease_token,
    cancel_requested, not_before, payload, created_at, updated_at
) VALUES (
    ?1, ?2, ?3, ?4, ?5, 'queued', ?6,
    COALESCE((SELECT token_floor FROM execution WHERE execution_id = ?2), 0),
    0, ?9 + ?8, ?7, ?9, ?9
)
ON CONFLICT (task_id) DO UPDATE SET
    execution_id = excluded.execution_id,
    step = excluded.step,
    pool = excluded.pool,
    priority = excluded.priority,
    status = 'queued',
    attempt = excluded.attempt,
    lease_expires_at = NULL,
    worker_id = NULL,
    cancel_requested = 0,
    not_before = excluded.not_before,
    payload = excluded.payload,
    updated_at = excluded.updated_at

-- ?1 task_id ?2 attempt ?3 delay ?4 execution_id ?5 now
-- name: requeue
UPDATE task_queue SET
    status = 'queued', attempt = ?2, not_before = ?5 + ?3, lease_expires_at = NULL,
    worker_id = NULL, cancel_requested = 0, updated_at = ?5
WHERE task_id = ?1 AND execution_id = ?4

-- ?1 task_id ?2 execution_id ?3 now. A queued task is canceled outright; a leased one is
-- flagged, and its holder learns it from the next heartbeat.
-- name: cancel_tasks
UPDATE task_queue SET
    status = CASE status WHEN 'queued' THEN 'canceled' ELSE status END,
    cancel_requested = CASE status WHEN 'leased' THEN 1 ELSE cancel_requested END,
    updated_at = ?3
WHERE task_id = ?1 AND execution_id = ?2 AND status IN ('queued', 'leased')

-- name: input_done
DELETE FROM inbox WHERE id = ? AND execution_id = ?

-- name: ready_tasks
SELECT task_id, attempt, lease_token, payload, not_before, execution_id FROM task_queue
WHERE pool = ? AND status = 'queued' AND not_before <= ?
ORDER BY priority DESC, not_before, rowid
LIMIT ?

-- Only rows of the executions given as a JSON list (so for the other _scoped queries).
-- name: ready_tasks_scoped
SELECT task_id, attempt, lease_token, payload, not_before, execution_id FROM task_queue
WHERE pool = ? AND status = 'queued' AND not_before <= ? AND execution_id IN (SELECT value FROM json_each(?))
ORDER BY priority DESC, not_before, rowid
LIMIT ?

-- name: lease
UPDATE task_queue SET
    status = 'leased', worker_id = ?, lease_token = ?, lease_expires_at = ?, updated_at = ?
WHERE task_id = ?

-- name: held
SELECT execution_id, cancel_requested FROM task_queue
WHERE task_id = ? AND lease_token = ? AND status = 'leased'

-- ?1 now ?2 task_id ?3 token: a leased task handed back by its holder.
-- name: release
UPDATE task_queue SET
    status = CASE cancel_requested WHEN 1 THEN 'canceled' ELSE 'queued' END,
    worker_id = NULL, lease_expires_at = NULL, updated_at = ?1
WHERE task_id = ?2 AND lease_token = ?3 AND status = 'leased'

-- name: expired_tasks
SELECT task_id, execution_id, attempt, worker_id FROM task_queue
WHERE status = 'leased' AND lease_expires_at < ?
ORDER BY lease_expires_at, rowid
LIMIT ?

-- name: expired_tasks_scoped
SELECT task_id, execution_id, attempt, worker_id FROM task_queue
WHERE status = 'leased' AND lease_expires_at < ? AND execution_id IN (SELECT value FROM json_each(?))
ORDER BY lease_expires_at, rowid
LIMIT ?

-- name: insert_input
INSERT INTO inbox (execution_id, kind, payload, created_at) VALUES (?, ?, ?, ?)

-- A timer is an input held (by nobody) until it is due.
-- name: insert_timer
INSERT INTO inbox (execution_id, kind, payload, created_at, claimed_by, claimed_until) VALUES (?, ?, ?, ?, 'timer', ?)

-- name: free_inputs
SELECT id, execution_id, kind, payload, created_at FROM inbox
WHERE (claimed_until IS NULL OR claimed_until < ?)
ORDER BY id
LIMIT ?

-- name: free_inputs_scoped
SELECT id, execution_id, kind, payload, created_at FROM inbox
WHERE (claimed_until IS NULL OR claimed_until < ?) AND execution_id IN (SELECT value FROM json_each(?))
ORDER BY id
LIMIT ?

-- Inputs held (hold not expired) under a holder's token; timers are held by 'timer'.
-- name: holders
SELECT DISTINCT claimed_by FROM inbox
WHERE claimed_until > ? AND claimed_by IS NOT NULL AND claimed_by <> 'timer'

-- name: mark_done
UPDATE task_queue SET status = 'done', updated_at = ? WHERE task_id = ?

-- name: extend_lease
UPDATE task_queue SET lease_expires_at = ?, updated_at = ? WHERE task_id = ?

-- name: queued_task
SELECT attempt, lease_token, payload FROM task_queue
WHERE task_id = ? AND execution_id = ? AND status = 'queued'

-- name: mark_expired
UPDATE task_queue SET status = 'expired', updated_at = ? WHERE task_id = ?

-- name: select_task
SELECT task_id, execution_id, step, pool, priority, status, attempt, lease_token, lease_expires_at, worker_id, cancel_requested, not_before, payload FROM task_queue WHERE task_id = ?

-- name: hold_input
UPDATE inbox SET claimed_by = ?, claimed_until = ? WHERE id = ?

-- The inputs of (gone) holders, their tokens given as a JSON list.
-- name: release_inputs
UPDATE inbox SET claimed_by = NULL, claimed_until = NULL
WHERE claimed_until > ? AND claimed_by IN (SELECT value FROM json_each(?))

-- name: input_exists
SELECT 1 FROM inbox WHERE id = ? AND execution_id = ?

-- A task that fails again after a replay updates its row: pending again, first_seen and
-- the replay count kept.
-- name: upsert_dlq
INSERT INTO dlq (message_id, execution_id, step_id, loop_index, loop_key, tool_kind, sink_id, attempts, reason, error_type, last_error, last_stack, first_seen, last_seen, payload, context_excerpt, task, status, replays, discard_reason, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (message_id) DO UPDATE SET
    execution_id = excluded.execution_id, step_id = excluded.step_id, loop_index = excluded.loop_index, loop_key = excluded.loop_key, tool_kind = excluded.tool_kind, sink_id = excluded.sink_id, attempts = excluded.attempts, reason = excluded.reason, error_type = excluded.error_type, last_error = excluded.last_error, last_stack = excluded.last_stack, last_seen = excluded.last_seen, payload = excluded.payload, context_excerpt = excluded.context_excerpt, task = excluded.task, status = excluded.status, discard_reason = excluded.discard_reason,
    updated_at = excluded.updated_at

-- name: set_dlq_status
UPDATE dlq SET status = ?, updated_at = ? WHERE message_id = ?
