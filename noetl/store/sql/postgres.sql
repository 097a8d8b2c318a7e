-- Named queries of the PostgreSQL store (noetl.store.queries). Times are the database's
-- now(); parameters are named (%(name)s).

-- --- the playbook catalog --------------------------------------------------------------

-- Versions of one path are numbered one writer at a time (advisory lock space 'noep').
-- name: lock_playbook_path
SELECT pg_advisory_xact_lock(1852794224, hashtext(%(path)s))

-- name: latest_playbook
SELECT path, version, name, text, created_at FROM playbook
WHERE path = %(path)s ORDER BY version DESC LIMIT 1

-- name: playbook_version
SELECT path, version, name, text, created_at FROM playbook
WHERE path = %(path)s AND version = %(version)s

-- name: insert_playbook
INSERT INTO playbook (path, version, name, text, created_at)
VALUES (%(path)s, %(version)s, %(name)s, %(text)s, %(created_at)s)

-- name: list_playbooks
SELECT DISTINCT ON (path) path, version, name, text, created_at FROM playbook
ORDER BY path, version DESC

-- --- workers -----------------------------------------------------------------------------

-- name: upsert_worker
INSERT INTO worker (worker_id, pool, hostname, pid, status, started_at, heartbeat_at)
VALUES (%(worker_id)s, %(pool)s, %(hostname)s, %(pid)s, %(status)s, %(started_at)s,
        %(heartbeat_at)s)
ON CONFLICT (worker_id) DO UPDATE SET
    pool = excluded.pool, hostname = excluded.hostname, pid = excluded.pid,
    status = excluded.status, started_at = excluded.started_at,
    heartbeat_at = excluded.heartbeat_at

-- The row is locked by worker_status, read first in the same transaction.
-- name: worker_heartbeat
UPDATE worker SET heartbeat_at = now() WHERE worker_id = %(worker_id)s

-- name: worker_status
SELECT status FROM worker WHERE worker_id = %(worker_id)s FOR UPDATE

-- name: request_drain
UPDATE worker SET status = 'draining'
WHERE status = 'running' AND (%(pool)s::text IS NULL OR pool = %(pool)s::text)

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
WHERE e.status = 'running' AND s.status->>'status' = 'parked'
GROUP BY e.playbook_name

-- name: stats_tasks
SELECT pool, status, count(*),
       min(not_before) FILTER (WHERE status = 'queued' AND not_before <= now())
FROM task_queue WHERE status IN ('queued', 'leased') GROUP BY pool, status

-- Timers that are not due yet are no backlog.
-- name: stats_inputs
SELECT count(*), min(created_at) FROM inbox
WHERE NOT (kind = 'timer' AND claimed_until > now())

-- --- the dead-letter queue (its writes go with a commit: noetl.store._pg_dlq) ----------

-- JSON columns as text (their NUL escapes are undone by the connector), times as epoch
-- seconds.
-- name: list_dead_letters
SELECT message_id, execution_id, step_id, loop_index, loop_key::text, tool_kind, sink_id,
       attempts, reason, error_type, last_error, last_stack,
       extract(epoch FROM first_seen)::float8, extract(epoch FROM last_seen)::float8,
       payload::text, context_excerpt, task::text, status, replays, discard_reason
FROM dlq
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(execution_id)s::text IS NULL OR execution_id = %(execution_id)s::text)
ORDER BY last_seen DESC, message_id DESC LIMIT %(limit)s OFFSET %(offset)s

-- name: get_dead_letter
SELECT message_id, execution_id, step_id, loop_index, loop_key::text, tool_kind, sink_id,
       attempts, reason, error_type, last_error, last_stack,
       extract(epoch FROM first_seen)::float8, extract(epoch FROM last_seen)::float8,
       payload::text, context_excerpt, task::text, status, replays, discard_reason
FROM dlq WHERE message_id = %(message_id)s

-- name: dead_letter_counts
SELECT status, count(*) FROM dlq GROUP BY status

-- name: pending_dead_letters
SELECT step_id, count(*) FROM dlq
WHERE execution_id = %(execution_id)s AND status = 'pending' GROUP BY step_id

-- Locks the entry: two replays (or a replay and a discard) decide one after the other.
-- KEY SHARE on the execution: a prune (FOR UPDATE ... SKIP LOCKED) passes it by meanwhile.
-- name: dead_letter_status
SELECT d.status, d.execution_id, e.pruned_at FROM dlq d
JOIN execution e ON e.execution_id = d.execution_id
WHERE d.message_id = %(message_id)s FOR UPDATE OF d FOR KEY SHARE OF e

-- name: mark_replayed
UPDATE dlq SET status = 'replayed', replays = replays + 1, updated_at = now()
WHERE message_id = %(message_id)s

-- name: post_replay_input
INSERT INTO inbox (execution_id, kind, payload, created_at)
VALUES (%(execution_id)s, 'replay', %(payload)s::jsonb, now())

-- name: mark_discarded
UPDATE dlq SET status = 'discarded', discard_reason = %(reason)s, updated_at = now()
WHERE message_id = %(message_id)s

-- --- credentials (ciphertext only: encryption happens above the store) ------------------

-- Puts of one name are serialized, so credential_exists (read after the lock, with a
-- snapshot of its own) tells a new name from a replaced one exactly (space 'noec').
-- name: lock_credential
SELECT pg_advisory_xact_lock(1852794211, hashtext(%(name)s))

-- name: credential_exists
SELECT 1 FROM credential WHERE name = %(name)s

-- name: put_credential
INSERT INTO credential (name, type, ciphertext, key_id, created_at, updated_at)
VALUES (%(name)s, %(type)s, %(ciphertext)s, %(key_id)s, %(created_at)s, %(updated_at)s)
ON CONFLICT (name) DO UPDATE SET type = excluded.type, ciphertext = excluded.ciphertext,
    key_id = excluded.key_id, updated_at = excluded.updated_at

-- name: get_credential
SELECT name, type, ciphertext, key_id, created_at, updated_at FROM credential
WHERE name = %(name)s

-- name: list_credentials
SELECT name, type, ciphertext, key_id, created_at, updated_at FROM credential
ORDER BY name COLLATE "C"

-- name: delete_credential
DELETE FROM credential WHERE name = %(name)s

-- name: reencrypt_credential
UPDATE credential SET ciphertext = %(ciphertext)s, key_id = %(key_id)s
WHERE name = %(name)s AND ciphertext = %(expected)s

-- --- API tokens ----------------------------------------------------------------------------

-- name: insert_token
INSERT INTO api_token (token_id, name, role, token_hash, created_at, last_used_at,
                       expires_at, revoked, revoked_at)
VALUES (%(token_id)s, %(name)s, %(role)s, %(token_hash)s, %(created_at)s,
        %(last_used_at)s, %(expires_at)s, %(revoked)s, %(revoked_at)s)

-- name: token_by_hash
SELECT token_id, name, role, token_hash, created_at, last_used_at, expires_at, revoked,
       revoked_at
FROM api_token WHERE token_hash = %(value)s

-- name: token_by_id
SELECT token_id, name, role, token_hash, created_at, last_used_at, expires_at, revoked,
       revoked_at
FROM api_token WHERE token_id = %(value)s

-- name: list_tokens
SELECT token_id, name, role, token_hash, created_at, last_used_at, expires_at, revoked,
       revoked_at
FROM api_token ORDER BY created_at, token_id

-- name: revoke_token
UPDATE api_token SET revoked = true, revoked_at = %(at)s
WHERE token_id = %(value)s AND NOT revoked

-- name: touch_token
UPDATE api_token SET last_used_at = %(at)s WHERE token_id = %(token_id)s

-- --- database sessions: one row per revision ----------------------------------------------

-- name: drop_expired_sessions
DELETE FROM session WHERE expires_at < %(before)s

-- name: session_revisions
SELECT session_key, revision, operation, token_id, role, created_at, expires_at,
       last_activity_at, client, written_at
FROM session WHERE session_key = %(key)s ORDER BY revision DESC LIMIT %(limit)s

-- name: insert_session
INSERT INTO session (session_key, revision, operation, token_id, role, created_at,
                     expires_at, last_activity_at, client, written_at)
VALUES (%(key)s, %(revision)s, %(operation)s, %(token_id)s, %(role)s, %(created_at)s,
        %(expires_at)s, %(last_activity_at)s, %(client)s, %(written_at)s)

-- name: trim_session
DELETE FROM session WHERE session_key = %(key)s AND revision <= %(oldest)s

-- --- executions and their event logs (reads; the writes go with a commit) -----------------

-- name: compiled_playbook
SELECT compiled FROM execution_input WHERE execution_id = %(execution_id)s

-- name: load_events
SELECT seq, type, ts, step, payload FROM event_log
WHERE execution_id = %(execution_id)s AND seq > %(after_seq)s ORDER BY seq LIMIT %(limit)s

-- name: execution_exists
SELECT pruned_at FROM execution WHERE execution_id = %(execution_id)s

-- name: get_execution
SELECT e.execution_id, e.playbook_name, e.playbook_path, COALESCE(i.playbook_text, ''), e.status,
       e.context, e.parent_execution_id, e.last_seq, e.created_at, e.updated_at,
       e.finished_at, e.pruned_at
FROM execution e LEFT JOIN execution_input i ON i.execution_id = e.execution_id
WHERE e.execution_id = %(execution_id)s

-- The execution row and its events, together: the events as the JSON text of an array
-- of [seq, type, epoch seconds, step, payload], in sequence order (NULL when none, and
-- for a log of more than 1,000 events: one text value holds at most 1 GB, so a long log
-- is read as rows, `load_events`).
-- name: load_execution
SELECT e.execution_id, e.playbook_name, e.playbook_path, COALESCE(i.playbook_text, ''), e.status,
       e.context, e.parent_execution_id, e.last_seq, e.created_at, e.updated_at,
       e.finished_at, e.pruned_at,
       CASE WHEN e.last_seq <= 1000 THEN
           (SELECT json_agg(json_build_array(v.seq, v.type, extract(epoch FROM v.ts), v.step,
                                             v.payload) ORDER BY v.seq)
            FROM event_log v WHERE v.execution_id = e.execution_id)::text
       END
FROM execution e LEFT JOIN execution_input i ON i.execution_id = e.execution_id
WHERE e.execution_id = %(execution_id)s

-- Many young executions' rows and events (`ids`: a JSON array), as `load_execution`
-- reads one: only those with at most `max_events` events and their history kept.
-- name: load_executions
SELECT e.execution_id, e.playbook_name, e.playbook_path, COALESCE(i.playbook_text, ''), e.status,
       e.context, e.parent_execution_id, e.last_seq, e.created_at, e.updated_at,
       e.finished_at, e.pruned_at,
       (SELECT json_agg(json_build_array(v.seq, v.type, extract(epoch FROM v.ts), v.step,
                                         v.payload) ORDER BY v.seq)
        FROM event_log v WHERE v.execution_id = e.execution_id)::text
FROM execution e LEFT JOIN execution_input i ON i.execution_id = e.execution_id
WHERE e.execution_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb))
  AND e.last_seq <= %(max_events)s AND e.pruned_at IS NULL

-- The finished ones of a list of executions (`ids`: a JSON array): the status column only.
-- name: finished_among
SELECT execution_id, status FROM execution
WHERE execution_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb)) AND status <> 'running'

-- name: list_executions
SELECT e.execution_id, e.playbook_name, e.playbook_path, COALESCE(i.playbook_text, ''), e.status,
       e.context, e.parent_execution_id, e.last_seq, e.created_at, e.updated_at,
       e.finished_at, e.pruned_at
FROM execution e LEFT JOIN execution_input i ON i.execution_id = e.execution_id
ORDER BY e.created_at DESC, e.created_order DESC LIMIT %(limit)s OFFSET %(offset)s

-- name: list_executions_by_status
SELECT e.execution_id, e.playbook_name, e.playbook_path, COALESCE(i.playbook_text, ''), e.status,
       e.context, e.parent_execution_id, e.last_seq, e.created_at, e.updated_at,
       e.finished_at, e.pruned_at
FROM execution e LEFT JOIN execution_input i ON i.execution_id = e.execution_id
WHERE e.status = %(status)s
ORDER BY e.created_at DESC, e.created_order DESC LIMIT %(limit)s OFFSET %(offset)s

-- The execution and its descendants, nearest first (a depth bound guards against a cycle
-- no code makes).
-- name: execution_family
WITH RECURSIVE family(id, depth) AS (
    SELECT execution_id, 0 FROM execution WHERE execution_id = %(execution_id)s
    UNION
    SELECT e.execution_id, f.depth + 1 FROM execution e JOIN family f
        ON e.parent_execution_id = f.id WHERE f.depth < 64
)
SELECT id FROM family GROUP BY id ORDER BY min(depth), id

-- name: get_steps
SELECT step, status FROM step_state WHERE execution_id = %(execution_id)s
ORDER BY created_order

-- name: queued_tasks
SELECT step, pool, count(*) FROM task_queue
WHERE execution_id = %(execution_id)s AND status = 'queued' GROUP BY step, pool

-- --- the result store (whole results kept outside the event log) ------------------------

-- name: put_result
INSERT INTO result_store (ref, execution_id, step, bytes, body, created_at)
VALUES (%(ref)s, %(execution_id)s, %(step)s, %(bytes)s, %(body)s, now())

-- name: get_result
SELECT ref, execution_id, step, bytes, body, created_at FROM result_store WHERE ref = %(ref)s

-- name: count_results
SELECT count(*), coalesce(sum(bytes), 0) FROM result_store
WHERE execution_id = %(execution_id)s

-- --- the checkpoint store (progress of tasks that run in parts) ---------------------------

-- name: save_checkpoint
INSERT INTO task_checkpoint (task_id, execution_id, attempt, body, updated_at)
VALUES (%(task_id)s, %(execution_id)s, %(attempt)s, %(body)s, now())
ON CONFLICT (task_id) DO UPDATE SET
    execution_id = excluded.execution_id, attempt = excluded.attempt, body = excluded.body,
    updated_at = excluded.updated_at
WHERE task_checkpoint.attempt <= excluded.attempt

-- name: load_checkpoint
SELECT task_id, execution_id, attempt, body, updated_at FROM task_checkpoint
WHERE task_id = %(task_id)s

-- name: drop_checkpoint
DELETE FROM task_checkpoint WHERE task_id = %(task_id)s

-- --- retention (noetl.store.managers.retention) ------------------------------------------

-- Finished executions not pruned yet, oldest first; one with a pending dead letter stays
-- until an operator settles it (its replay needs the history). SKIP LOCKED: one being
-- written to (a late commit, a replay taking its row) is left for the next pass; the row
-- lock keeps it from being written while its history goes.
-- name: prunable_executions
SELECT execution_id FROM execution
WHERE pruned_at IS NULL AND status <> 'running' AND finished_at < %(before)s
  AND NOT EXISTS (SELECT 1 FROM dlq d WHERE d.execution_id = execution.execution_id
                  AND d.status = 'pending')
ORDER BY finished_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED

-- The fencing floor: the highest token of the rows about to go, kept on the tombstone.
-- name: keep_token_floor
UPDATE execution x SET token_floor = GREATEST(x.token_floor, m.top)
FROM (SELECT execution_id, max(lease_token) AS top FROM task_queue
      WHERE execution_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb))
      GROUP BY execution_id) AS m
WHERE x.execution_id = m.execution_id

-- The history of a batch of executions (`ids`: a JSON array of their ids).
-- name: prune_task_queue
DELETE FROM task_queue WHERE execution_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb))

-- name: prune_inbox
DELETE FROM inbox WHERE execution_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb))

-- name: prune_execution_input
DELETE FROM execution_input WHERE execution_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb))

-- name: prune_event_log
DELETE FROM event_log WHERE execution_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb))

-- name: prune_step_state
DELETE FROM step_state WHERE execution_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb))

-- name: prune_result_store
DELETE FROM result_store WHERE execution_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb))

-- name: prune_task_checkpoint
DELETE FROM task_checkpoint WHERE execution_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb))

-- name: tombstone_executions
UPDATE execution SET pruned_at = now(), context = '{}'
WHERE execution_id IN (SELECT jsonb_array_elements_text(%(ids)s::jsonb))

-- Dead letters an operator settled before `before`, of pruned executions; pending ones
-- wait for their operator.
-- name: prune_dlq
DELETE FROM dlq WHERE message_id IN (
    SELECT d.message_id FROM dlq d JOIN execution e ON e.execution_id = d.execution_id
    WHERE d.status <> 'pending' AND d.updated_at < %(dlq_before)s AND e.pruned_at IS NOT NULL
    LIMIT %(limit)s)

-- A dry run's counts, what a prune would delete now: the executions, then the rows of
-- each table in PRUNED_TABLES order (noetl.store.records), the dead letters last.
-- name: count_prunable
WITH gone AS (
    SELECT execution_id FROM execution
    WHERE pruned_at IS NULL AND status <> 'running' AND finished_at < %(before)s
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
     WHERE d.status <> 'pending' AND d.updated_at < %(dlq_before)s
       AND (e.pruned_at IS NOT NULL OR e.execution_id IN (SELECT execution_id FROM gone)))


-- --- schedules and their ticks (noetl.store.managers.schedules) ----------------------------

-- name: upsert_schedule
-- A schedule made again keeps its creation time (where its ticks start) and paused state.
INSERT INTO schedule (name, playbook_path, source, spec, paused, created_at, updated_at)
VALUES (%(name)s, %(playbook_path)s, %(source)s, %(spec)s, %(paused)s, now(), now())
ON CONFLICT (name) DO UPDATE SET
    playbook_path = excluded.playbook_path, source = excluded.source, spec = excluded.spec,
    updated_at = excluded.updated_at

-- name: get_schedule
SELECT name, playbook_path, source, spec, paused, created_at, updated_at, token_hash,
    token_sealed
FROM schedule
WHERE name = %(name)s

-- name: list_schedules
SELECT name, playbook_path, source, spec, paused, created_at, updated_at, token_hash,
    token_sealed
FROM schedule
ORDER BY name

-- name: pause_schedule
UPDATE schedule SET paused = %(paused)s, updated_at = now() WHERE name = %(name)s

-- name: delete_schedule
DELETE FROM schedule WHERE name = %(name)s

-- name: delete_schedule_ticks
DELETE FROM schedule_tick WHERE schedule = %(name)s

-- name: claim_tick
-- The key (schedule, tick_ms) admits one row: the first claim of a tick wins, any later
-- one (another server looking at the same schedule) writes nothing.
INSERT INTO schedule_tick
    (schedule, tick_ms, manual, status, execution_id, owner, error, claimed_at, updated_at)
VALUES (%(schedule)s, %(tick_ms)s, %(manual)s, %(status)s, %(execution_id)s, %(owner)s,
        %(error)s, now(), now())
ON CONFLICT (schedule, tick_ms) DO NOTHING

-- name: last_tick
SELECT schedule, tick_ms, manual, status, execution_id, owner, error, claimed_at, updated_at
FROM schedule_tick WHERE schedule = %(schedule)s AND manual = %(manual)s
ORDER BY tick_ms DESC LIMIT 1

-- name: list_ticks
SELECT schedule, tick_ms, manual, status, execution_id, owner, error, claimed_at, updated_at
FROM schedule_tick WHERE schedule = %(schedule)s
ORDER BY tick_ms DESC LIMIT %(limit)s

-- name: ticks_by_status
SELECT schedule, tick_ms, manual, status, execution_id, owner, error, claimed_at, updated_at
FROM schedule_tick WHERE status = %(status)s
ORDER BY tick_ms LIMIT %(limit)s

-- name: update_tick
-- Only from the status the caller saw: of two servers moving one tick on, one does.
UPDATE schedule_tick SET status = %(status)s, error = %(error)s, updated_at = now()
WHERE schedule = %(schedule)s AND tick_ms = %(tick_ms)s AND status = %(expect)s

-- name: set_schedule_token
UPDATE schedule SET token_hash = %(token_hash)s, token_sealed = %(token_sealed)s,
    updated_at = now() WHERE name = %(name)s

-- name: delete_schedule_deliveries
DELETE FROM schedule_delivery WHERE schedule = %(name)s

-- A delivery's key admits one row: the first request with it wins, a repeat reads it.
-- name: claim_delivery
INSERT INTO schedule_delivery (schedule, idempotency_key, execution_id, received_at)
VALUES (%(schedule)s, %(key)s, %(execution_id)s, now())
ON CONFLICT (schedule, idempotency_key) DO NOTHING

-- name: get_delivery
SELECT execution_id FROM schedule_delivery
WHERE schedule = %(schedule)s AND idempotency_key = %(key)s
