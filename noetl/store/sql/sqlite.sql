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

-- name: pending_dead_letters
SELECT step_id, count(*) FROM dlq
WHERE execution_id = :execution_id AND status = 'pending' GROUP BY step_id

-- name: dead_letter_status
SELECT d.status, d.execution_id, e.pruned_at FROM dlq d
JOIN execution e ON e.execution_id = d.execution_id
WHERE d.message_id = :message_id

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
SELECT pruned_at FROM execution WHERE execution_id = :execution_id

-- name: get_execution
SELECT e.execution_id, e.playbook_name, e.playbook_path, COALESCE(i.playbook_text, ''), e.status,
       e.context, e.parent_execution_id, e.last_seq, e.created_at, e.updated_at,
       e.finished_at, e.pruned_at
FROM execution e LEFT JOIN execution_input i ON i.execution_id = e.execution_id
WHERE e.execution_id = :execution_id

-- The execution row; its events come with a second statement (`load_events`) in the
-- same session (SQLite's JSON functions print a time with 15 digits, not all of them).
-- name: load_execution
SELECT e.execution_id, e.playbook_name, e.playbook_path, COALESCE(i.playbook_text, ''), e.status,
       e.context, e.parent_execution_id, e.last_seq, e.created_at, e.updated_at,
       e.finished_at, e.pruned_at, NULL
FROM execution e LEFT JOIN execution_input i ON i.execution_id = e.execution_id
WHERE e.execution_id = :execution_id

-- Many young executions' rows (`ids`: a JSON array), as `load_execution` reads one:
-- only those with at most `max_events` events and their history kept.
-- name: load_executions
SELECT e.execution_id, e.playbook_name, e.playbook_path, COALESCE(i.playbook_text, ''), e.status,
       e.context, e.parent_execution_id, e.last_seq, e.created_at, e.updated_at,
       e.finished_at, e.pruned_at, NULL
FROM execution e LEFT JOIN execution_input i ON i.execution_id = e.execution_id
WHERE e.execution_id IN (SELECT value FROM json_each(:ids))
  AND e.last_seq <= :max_events AND e.pruned_at IS NULL

-- The finished ones of a list of executions (`ids`: a JSON array): the status column only.
-- name: finished_among
SELECT execution_id, status FROM execution
WHERE execution_id IN (SELECT value FROM json_each(:ids)) AND status <> 'running'

-- name: list_executions
SELECT e.execution_id, e.playbook_name, e.playbook_path, COALESCE(i.playbook_text, ''), e.status,
       e.context, e.parent_execution_id, e.last_seq, e.created_at, e.updated_at,
       e.finished_at, e.pruned_at
FROM execution e LEFT JOIN execution_input i ON i.execution_id = e.execution_id
ORDER BY e.created_at DESC, e.rowid DESC LIMIT :limit OFFSET :offset

-- name: list_executions_by_status
SELECT e.execution_id, e.playbook_name, e.playbook_path, COALESCE(i.playbook_text, ''), e.status,
       e.context, e.parent_execution_id, e.last_seq, e.created_at, e.updated_at,
       e.finished_at, e.pruned_at
FROM execution e LEFT JOIN execution_input i ON i.execution_id = e.execution_id
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

-- name: queued_tasks
SELECT step, pool, count(*) FROM task_queue
WHERE execution_id = :execution_id AND status = 'queued' GROUP BY step, pool

-- --- the result store (whole results kept outside the event log) ------------------------

-- name: put_result
INSERT INTO result_store (ref, execution_id, step, bytes, body, created_at)
VALUES (:ref, :execution_id, :step, :bytes, :body, :now)

-- name: get_result
SELECT ref, execution_id, step, bytes, body, created_at FROM result_store WHERE ref = :ref

-- name: count_results
SELECT count(*), coalesce(sum(bytes), 0) FROM result_store WHERE execution_id = :execution_id

-- --- the checkpoint store (progress of tasks that run in parts) ---------------------------

-- name: save_checkpoint
INSERT INTO task_checkpoint (task_id, execution_id, attempt, body, updated_at)
VALUES (:task_id, :execution_id, :attempt, :body, :now)
ON CONFLICT (task_id) DO UPDATE SET
    execution_id = excluded.execution_id, attempt = excluded.attempt, body = excluded.body,
    updated_at = excluded.updated_at
WHERE task_checkpoint.attempt <= excluded.attempt

-- name: load_checkpoint
SELECT task_id, execution_id, attempt, body, updated_at FROM task_checkpoint
WHERE task_id = :task_id

-- name: drop_checkpoint
DELETE FROM task_checkpoint WHERE task_id = :task_id

-- --- retention (noetl.store.managers.retention) ------------------------------------------

-- Finished executions not pruned yet, oldest first, but for those with a pending dead
-- letter (its replay needs the history; they stay until an operator settles it). The
-- batch's transaction holds the write lock: nothing writes to them meanwhile.
-- name: prunable_executions
SELECT execution_id FROM execution
WHERE pruned_at IS NULL AND status <> 'running' AND finished_at < :before
  AND NOT EXISTS (SELECT 1 FROM dlq d WHERE d.execution_id = execution.execution_id
                  AND d.status = 'pending')
ORDER BY finished_at LIMIT :limit

-- The fencing floor: the highest token of the rows about to go, kept on the tombstone.
-- name: keep_token_floor
UPDATE execution SET token_floor = max(token_floor, (
    SELECT coalesce(max(t.lease_token), 0) FROM task_queue t
    WHERE t.execution_id = execution.execution_id))
WHERE execution_id IN (SELECT value FROM json_each(:ids))

-- The history of a batch of executions (`ids`: a JSON array of their ids).
-- name: prune_task_queue
DELETE FROM task_queue WHERE execution_id IN (SELECT value FROM json_each(:ids))

-- name: prune_inbox
DELETE FROM inbox WHERE execution_id IN (SELECT value FROM json_each(:ids))

-- name: prune_execution_input
DELETE FROM execution_input WHERE execution_id IN (SELECT value FROM json_each(:ids))

-- name: prune_event_log
DELETE FROM event_log WHERE execution_id IN (SELECT value FROM json_each(:ids))

-- name: prune_step_state
DELETE FROM step_state WHERE execution_id IN (SELECT value FROM json_each(:ids))

-- name: prune_result_store
DELETE FROM result_store WHERE execution_id IN (SELECT value FROM json_each(:ids))

-- name: prune_task_checkpoint
DELETE FROM task_checkpoint WHERE execution_id IN (SELECT value FROM json_each(:ids))

-- name: tombstone_executions
UPDATE execution SET pruned_at = :now, context = '{}'
WHERE execution_id IN (SELECT value FROM json_each(:ids))

-- Dead letters an operator settled before `before`, of pruned executions; pending ones
-- wait for their operator.
-- name: prune_dlq
DELETE FROM dlq WHERE message_id IN (
    SELECT d.message_id FROM dlq d JOIN execution e ON e.execution_id = d.execution_id
    WHERE d.status <> 'pending' AND d.updated_at < :dlq_before AND e.pruned_at IS NOT NULL
    LIMIT :limit)

-- A dry run's counts, what a prune would delete now: the executions, then the rows of
-- each table in PRUNED_TABLES order (noetl.store.records), the dead letters last.
-- name: count_prunable
WITH gone AS (
    SELECT execution_id FROM execution
    WHERE pruned_at IS NULL AND status <> 'running' AND finished_at < :before
  AND NOT EXISTS (SELECT 1 FROM dlq d WHERE d.execution_id = execution.execution_id
                  AND d.status = 'pending')
)
SELECT
    (SELECT count(*) FROM gone),
    (SELECT count(*) FROM task_queue WHERE execution_id IN (SELECT execution_id FROM gone)),
    (SELECT count(*) FROM inbox WHERE execution_id IN (SELECT execution_id FROM gone)),
    (SELECT count(*) FROM execution_input WHERE execution_id IN (SELECT execution_id FROM gone)),
    (SELECT count(*) FROM event_log WHERE execution_id IN (SELECT execution_id FROM gone)),
    (SELECT count(*) FROM step_state WHERE execution_id IN (SELECT execution_id FROM gone)),
    (SELECT count(*) FROM result_store WHERE execution_id IN (SELECT execution_id FROM gone)),
    (SELECT count(*) FROM task_checkpoint WHERE execution_id IN (SELECT execution_id FROM gone)),
    (SELECT count(*) FROM dlq d JOIN execution e ON e.execution_id = d.execution_id
     WHERE d.status <> 'pending' AND d.updated_at < :dlq_before
       AND (e.pruned_at IS NOT NULL OR e.execution_id IN (SELECT execution_id FROM gone)))


-- --- schedules and their ticks (noetl.store.managers.schedules) ----------------------------

-- name: upsert_schedule
-- A schedule made again keeps its creation time (where its ticks start) and paused state.
INSERT INTO schedule (name, playbook_path, source, spec, paused, created_at, updated_at)
VALUES (:name, :playbook_path, :source, :spec, :paused, :now, :now)
ON CONFLICT (name) DO UPDATE SET
    playbook_path = excluded.playbook_path, source = excluded.source, spec = excluded.spec,
    updated_at = excluded.updated_at

-- name: get_schedule
SELECT name, playbook_path, source, spec, paused, created_at, updated_at, token_hash,
    token_sealed
FROM schedule
WHERE name = :name

-- name: list_schedules
SELECT name, playbook_path, source, spec, paused, created_at, updated_at, token_hash,
    token_sealed
FROM schedule
ORDER BY name

-- name: pause_schedule
UPDATE schedule SET paused = :paused, updated_at = :now WHERE name = :name

-- name: delete_schedule
DELETE FROM schedule WHERE name = :name

-- name: delete_schedule_ticks
DELETE FROM schedule_tick WHERE schedule = :name

-- name: claim_tick
-- The key (schedule, tick_ms) admits one row: the first claim of a tick wins, any later
-- one (another server looking at the same schedule) writes nothing.
INSERT INTO schedule_tick
    (schedule, tick_ms, manual, status, execution_id, owner, error, claimed_at, updated_at)
VALUES (:schedule, :tick_ms, :manual, :status, :execution_id, :owner,
        :error, :now, :now)
ON CONFLICT (schedule, tick_ms) DO NOTHING

-- name: last_tick
SELECT schedule, tick_ms, manual, status, execution_id, owner, error, claimed_at, updated_at
FROM schedule_tick WHERE schedule = :schedule AND manual = :manual
ORDER BY tick_ms DESC LIMIT 1

-- name: list_ticks
SELECT schedule, tick_ms, manual, status, execution_id, owner, error, claimed_at, updated_at
FROM schedule_tick WHERE schedule = :schedule
ORDER BY tick_ms DESC LIMIT :limit

-- name: ticks_by_status
SELECT schedule, tick_ms, manual, status, execution_id, owner, error, claimed_at, updated_at
FROM schedule_tick WHERE status = :status
ORDER BY tick_ms LIMIT :limit

-- name: update_tick
-- Only from the status the caller saw: of two servers moving one tick on, one does.
UPDATE schedule_tick SET status = :status, error = :error, updated_at = :now
WHERE schedule = :schedule AND tick_ms = :tick_ms AND status = :expect

-- name: set_schedule_token
UPDATE schedule SET token_hash = :token_hash, token_sealed = :token_sealed,
    updated_at = :now WHERE name = :name

-- name: delete_schedule_deliveries
DELETE FROM schedule_delivery WHERE schedule = :name

-- A delivery's key admits one row: the first request with it wins, a repeat reads it.
-- name: claim_delivery
INSERT INTO schedule_delivery (schedule, idempotency_key, execution_id, received_at)
VALUES (:schedule, :key, :execution_id, :now)
ON CONFLICT (schedule, idempotency_key) DO NOTHING

-- name: get_delivery
SELECT execution_id FROM schedule_delivery
WHERE schedule = :schedule AND idempotency_key = :key
