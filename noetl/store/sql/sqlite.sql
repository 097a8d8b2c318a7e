-- Named queries of the SQLite store (noetl.store.queries). `:now` is the store's clock
-- (epoch seconds), given to every query by the connector; parameters are named (:name).

-- --- the playbook catalog --------------------------------------------------------------

-- The transaction holds the write lock from its start (BEGIN IMMEDIATE): nothing to take.
-- name: lock_playbook_path
SELECT 1

-- name: latest_playbook
SELECT path, version, name, text, created_at FROM playbook
WHERE path = :path ORDER BY version DESC LIMIT 1

-- name: playbook_version
SELECT path, version, name, text, created_at FROM playbook
WHERE path = :path AND version = :version

-- name: insert_playbook
INSERT INTO playbook (path, version, name, text, created_at)
VALUES (:path, :version, :name, :text, :created_at)

-- name: list_playbooks
SELECT path, version, name, text, created_at FROM playbook p
WHERE version = (SELECT MAX(version) FROM playbook WHERE path = p.path) ORDER BY path

-- --- workers -----------------------------------------------------------------------------

-- name: upsert_worker
INSERT INTO worker (worker_id, pool, hostname, pid, status, started_at, heartbeat_at)
VALUES (:worker_id, :pool, :hostname, :pid, :status, :started_at, :heartbeat_at)
ON CONFLICT (worker_id) DO UPDATE SET
    pool = excluded.pool, hostname = excluded.hostname, pid = excluded.pid,
    status = excluded.status, started_at = excluded.started_at,
    heartbeat_at = excluded.heartbeat_at

-- No RETURNING (older SQLite libraries lack it): the status is read first, in the same
-- transaction (see worker_status).
-- name: worker_heartbeat
UPDATE worker SET heartbeat_at = :now WHERE worker_id = :worker_id

-- name: worker_status
SELECT status FROM worker WHERE worker_id = :worker_id

-- name: request_drain
UPDATE worker SET status = 'draining'
WHERE status = 'running' AND (:pool IS NULL OR pool = :pool)

-- name: list_workers
SELECT worker_id, pool, hostname, pid, status, started_at, heartbeat_at FROM worker
ORDER BY worker_id

-- --- the counts of Store.stats (read when the metrics are scraped) ----------------------

-- name: stats_executions
SELECT playbook_name, status, count(*), min(updated_at) FROM execution
GROUP BY playbook_name, status

-- name: stats_parked
SELECT e.playbook_name, count(*) FROM step_state s
JOIN execution e ON e.execution_id = s.execution_id
WHERE e.status = 'running' AND json_extract(s.status, '$.status') = 'parked'
GROUP BY e.playbook_name

-- name: stats_tasks
SELECT pool, status, count(*),
       min(CASE WHEN status = 'queued' AND not_before <= :now THEN not_before END)
FROM task_queue WHERE status IN ('queued', 'leased') GROUP BY pool, status

-- Timers that are not due yet are no backlog.
-- name: stats_inputs
SELECT count(*), min(created_at) FROM inbox WHERE NOT (kind = 'timer' AND claimed_until > :now)

-- --- the dead-letter queue (its writes go with a commit: noetl.store._sqlite_dlq) -------

-- name: list_dead_letters
SELECT message_id, execution_id, step_id, loop_index, loop_key, tool_kind, sink_id,
       attempts, reason, error_type, last_error, last_stack, first_seen, last_seen,
       payload, context_excerpt, task, status, replays, discard_reason
FROM dlq
WHERE (:status IS NULL OR status = :status)
  AND (:execution_id IS NULL OR execution_id = :execution_id)
ORDER BY last_seen DESC, message_id DESC LIMIT :limit OFFSET :offset

-- name: get_dead_letter
SELECT message_id, execution_id, step_id, loop_index, loop_key, tool_kind, sink_id,
       attempts, reason, error_type, last_error, last_stack, first_seen, last_seen,
       payload, context_excerpt, task, status, replays, discard_reason
FROM dlq WHERE message_id = :message_id

-- name: dead_letter_counts
SELECT status, count(*) FROM dlq GROUP BY status

-- name: dead_letter_status
SELECT status, execution_id FROM dlq WHERE message_id = :message_id

-- name: mark_replayed
UPDATE dlq SET status = 'replayed', replays = replays + 1, updated_at = :now
WHERE message_id = :message_id

-- name: post_replay_input
INSERT INTO inbox (execution_id, kind, payload, created_at)
VALUES (:execution_id, 'replay', :payload, :now)

-- name: mark_discarded
UPDATE dlq SET status = 'discarded', discard_reason = :reason, updated_at = :now
WHERE message_id = :message_id

-- --- credentials (ciphertext only: encryption happens above the store) ------------------

-- The transaction holds the write lock from its start (BEGIN IMMEDIATE): nothing to take.
-- name: lock_credential
SELECT 1

-- name: credential_exists
SELECT 1 FROM credential WHERE name = :name

-- name: put_credential
INSERT INTO credential (name, type, ciphertext, key_id, created_at, updated_at)
VALUES (:name, :type, :ciphertext, :key_id, :created_at, :updated_at)
ON CONFLICT (name) DO UPDATE SET type = excluded.type, ciphertext = excluded.ciphertext,
    key_id = excluded.key_id, updated_at = excluded.updated_at

-- name: get_credential
SELECT name, type, ciphertext, key_id, created_at, updated_at FROM credential
WHERE name = :name

-- name: list_credentials
SELECT name, type, ciphertext, key_id, created_at, updated_at FROM credential
ORDER BY name

-- name: delete_credential
DELETE FROM credential WHERE name = :name

-- name: reencrypt_credential
UPDATE credential SET ciphertext = :ciphertext, key_id = :key_id
WHERE name = :name AND ciphertext = :expected

-- --- API tokens ----------------------------------------------------------------------------

-- name: insert_token
INSERT INTO api_token (token_id, name, role, token_hash, created_at, last_used_at,
                       expires_at, revoked, revoked_at)
VALUES (:token_id, :name, :role, :token_hash, :created_at,
        :last_used_at, :expires_at, :revoked, :revoked_at)

-- name: token_by_hash
SELECT token_id, name, role, token_hash, created_at, last_used_at, expires_at, revoked,
       revoked_at
FROM api_token WHERE token_hash = :value

-- name: token_by_id
SELECT token_id, name, role, token_hash, created_at, last_used_at, expires_at, revoked,
       revoked_at
FROM api_token WHERE token_id = :value

-- name: list_tokens
SELECT token_id, name, role, token_hash, created_at, last_used_at, expires_at, revoked,
       revoked_at
FROM api_token ORDER BY created_at, token_id

-- name: revoke_token
UPDATE api_token SET revoked = 1, revoked_at = :at
WHERE token_id = :value AND revoked = 0

-- name: touch_token
UPDATE api_token SET last_used_at = :at WHERE token_id = :token_id

-- --- database sessions: one row per revision ----------------------------------------------

-- name: drop_expired_sessions
DELETE FROM session WHERE expires_at < :before

-- name: session_revisions
SELECT session_key, revision, operation, token_id, role, created_at, expires_at,
       last_activity_at, client, written_at
FROM session WHERE session_key = :key ORDER BY revision DESC LIMIT :limit

-- name: insert_session
INSERT INTO session (session_key, revision, operation, token_id, role, created_at,
                     expires_at, last_activity_at, client, written_at)
VALUES (:key, :revision, :operation, :token_id, :role, :created_at,
        :expires_at, :last_activity_at, :client, :written_at)

-- name: trim_session
DELETE FROM session WHERE session_key = :key AND revision <= :oldest

-- --- executions and their event logs (reads; the writes go with a commit) -----------------

-- name: compiled_playbook
SELECT compiled FROM execution_input WHERE execution_id = :execution_id

-- A NULL limit is none (-1 in SQLite).
-- name: load_events
SELECT seq, type, ts, step, payload FROM event_log
WHERE execution_id = :execution_id AND seq > :after_seq ORDER BY seq
LIMIT ifnull(:limit, -1)

-- name: execution_exists
SELECT 1 FROM execution WHERE execution_id = :execution_id

-- name: get_execution
SELECT e.execution_id, e.playbook_name, e.playbook_path, i.playbook_text, e.status,
       e.context, e.parent_execution_id, e.last_seq, e.created_at, e.updated_at,
       e.finished_at
FROM execution e JOIN execution_input i ON i.execution_id = e.execution_id
WHERE e.execution_id = :execution_id

-- name: list_executions
SELECT e.execution_id, e.playbook_name, e.playbook_path, i.playbook_text, e.status,
       e.context, e.parent_execution_id, e.last_seq, e.created_at, e.updated_at,
       e.finished_at
FROM execution e JOIN execution_input i ON i.execution_id = e.execution_id
ORDER BY e.created_at DESC, e.rowid DESC LIMIT :limit OFFSET :offset

-- name: list_executions_by_status
SELECT e.execution_id, e.playbook_name, e.playbook_path, i.playbook_text, e.status,
       e.context, e.parent_execution_id, e.last_seq, e.created_at, e.updated_at,
       e.finished_at
FROM execution e JOIN execution_input i ON i.execution_id = e.execution_id
WHERE e.status = :status
ORDER BY e.created_at DESC, e.rowid DESC LIMIT :limit OFFSET :offset

-- The execution and its descendants, nearest first (a depth bound guards against a cycle
-- no code makes).
-- name: execution_family
WITH RECURSIVE family(id, depth) AS (
    SELECT execution_id, 0 FROM execution WHERE execution_id = :execution_id
    UNION
    SELECT e.execution_id, f.depth + 1 FROM execution e JOIN family f
        ON e.parent_execution_id = f.id WHERE f.depth < 64
)
SELECT id FROM family GROUP BY id ORDER BY min(depth), id

-- name: get_steps
SELECT step, status FROM step_state WHERE execution_id = :execution_id ORDER BY rowid

-- --- the commit, the task queue and the inbox (noetl.store.sqlite, _sqlite_queue, _sqlite_dlq)
-- Positional parameters (? or ?N); every write runs in the caller's BEGIN IMMEDIATE
-- transaction, timed by the store's clock (given as a parameter).

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

-- name: update_execution
UPDATE execution SET
    last_seq = :last_seq,
    updated_at = :now,
    status = COALESCE(:status, status),
    finished_at = CASE WHEN :status IS NULL THEN finished_at ELSE :finished_at END,
    context = COALESCE(:context, context)
WHERE execution_id = :execution_id

-- name: upsert_step
INSERT INTO step_state (execution_id, step, status, updated_at) VALUES (?, ?, ?, ?)
ON CONFLICT (execution_id, step) DO UPDATE SET
    status = excluded.status, updated_at = excluded.updated_at

-- ?1 task_id ?2 execution_id ?3 step ?4 pool ?5 priority ?6 attempt ?7 payload ?8 delay ?9 now
-- Enqueueing an id again (a step run again) reuses the row and keeps its lease_token, so
-- the fencing token still only grows and a holder of an older lease stays fenced off.
-- name: enqueue
INSERT INTO task_queue (
    task_id, execution_id, step, pool, priority, status, attempt, lease_token,
    cancel_requested, not_before, payload, created_at, updated_at
) VALUES (?1, ?2, ?3, ?4, ?5, 'queued', ?6, 0, 0, ?9 + ?8, ?7, ?9, ?9)
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
