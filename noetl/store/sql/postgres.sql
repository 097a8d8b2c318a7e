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

-- Locks the entry: two replays (or a replay and a discard) decide one after the other.
-- name: dead_letter_status
SELECT status, execution_id FROM dlq WHERE message_id = %(message_id)s FOR UPDATE

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
SELECT 1 FROM execution WHERE execution_id = %(execution_id)s

-- name: get_execution
SELECT e.execution_id, e.playbook_name, e.playbook_path, i.playbook_text, e.status,
       e.context, e.parent_execution_id, e.last_seq, e.created_at, e.updated_at,
       e.finished_at
FROM execution e JOIN execution_input i ON i.execution_id = e.execution_id
WHERE e.execution_id = %(execution_id)s

-- name: list_executions
SELECT e.execution_id, e.playbook_name, e.playbook_path, i.playbook_text, e.status,
       e.context, e.parent_execution_id, e.last_seq, e.created_at, e.updated_at,
       e.finished_at
FROM execution e JOIN execution_input i ON i.execution_id = e.execution_id
ORDER BY e.created_at DESC, e.created_order DESC LIMIT %(limit)s OFFSET %(offset)s

-- name: list_executions_by_status
SELECT e.execution_id, e.playbook_name, e.playbook_path, i.playbook_text, e.status,
       e.context, e.parent_execution_id, e.last_seq, e.created_at, e.updated_at,
       e.finished_at
FROM execution e JOIN execution_input i ON i.execution_id = e.execution_id
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

-- --- the commit, the task queue and the inbox (noetl.store.postgres, _pg_queue, _pg_dlq) ---
-- Positional parameters (%s; %b: binary, the arrays of an `unnest`).

-- name: insert_execution
WITH e AS (
    INSERT INTO execution (execution_id, playbook_name, playbook_path, status, context,
                           parent_execution_id, last_seq, created_at, updated_at, finished_at)
    VALUES (%(execution_id)s, %(playbook_name)s, %(playbook_path)s, %(status)s,
            %(context)s::jsonb, %(parent_execution_id)s, 0, %(created_at)s, %(updated_at)s,
            %(finished_at)s)
    ON CONFLICT (execution_id) DO NOTHING
    RETURNING execution_id
)
INSERT INTO execution_input (execution_id, playbook_text, compiled)
SELECT execution_id, %(playbook_text)s, %(compiled)s FROM e
RETURNING execution_id

-- NO KEY UPDATE: serializes writers of one execution, yet lets inserts that only reference
-- it (inbox rows from `complete`, `post_input`, the reaper) pass without waiting.
-- name: lock_executions
SELECT execution_id, last_seq FROM execution WHERE execution_id = ANY(%b::text[]) ORDER BY execution_id FOR NO KEY UPDATE

-- Set-based writes: one statement per kind of row for a whole commit (many executions,
-- many events), with the rows passed as arrays. PostgreSQL's cost is per statement far
-- more than per row, so a loop of a thousand items costs a few statements per commit.
-- name: insert_events
INSERT INTO event_log (execution_id, seq, type, ts, step, payload)
SELECT e, s, t, ts, st, p::jsonb
FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::timestamptz[], %b::text[], %b::text[])
    AS u(e, s, t, ts, st, p)

-- name: update_executions
UPDATE execution x SET
    last_seq = u.last_seq,
    updated_at = u.now,
    status = COALESCE(u.status, x.status),
    finished_at = CASE WHEN u.status IS NULL THEN x.finished_at ELSE u.finished_at END,
    context = COALESCE(u.context::jsonb, x.context)
FROM unnest(%b::text[], %b::bigint[], %b::timestamptz[], %b::text[], %b::timestamptz[],
            %b::text[]) AS u(execution_id, last_seq, now, status, finished_at, context)
WHERE x.execution_id = u.execution_id

-- name: upsert_steps
INSERT INTO step_state (execution_id, step, status, updated_at)
SELECT e, st, s::jsonb, ts
FROM unnest(%b::text[], %b::text[], %b::text[], %b::timestamptz[]) AS u(e, st, s, ts)
ON CONFLICT (execution_id, step) DO UPDATE SET
    status = excluded.status, updated_at = excluded.updated_at

-- Queue changes are timed by now(): the database clock at the start of the transaction.
-- A task id enqueued again (a step called again) re-queues its row and keeps its
-- lease_token, so the fencing token only grows and an older lease stays fenced off.
-- name: enqueue_all
INSERT INTO task_queue (task_id, execution_id, step, pool, priority, attempt, payload,
                        not_before, status, created_at, updated_at)
SELECT t, e, st, pl, pr, a, p::jsonb, now() + make_interval(secs => d), 'queued', now(), now()
FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::int[], %b::int[], %b::text[],
            %b::float8[]) AS u(t, e, st, pl, pr, a, p, d)
ON CONFLICT (task_id) DO UPDATE SET
    execution_id = excluded.execution_id, step = excluded.step, pool = excluded.pool,
    priority = excluded.priority, status = 'queued', attempt = excluded.attempt,
    lease_expires_at = NULL, worker_id = NULL, cancel_requested = false,
    not_before = excluded.not_before, payload = excluded.payload,
    updated_at = excluded.updated_at

-- The (id, execution) pairs of a commit's consumed inputs that are no longer in the inbox.
-- name: consumed_inputs
SELECT d.id, d.e FROM unnest(%b::bigint[], %b::text[]) AS d(id, e)
WHERE NOT EXISTS (SELECT 1 FROM inbox i WHERE i.id = d.id AND i.execution_id = d.e)

-- name: delete_all_inputs
DELETE FROM inbox i USING unnest(%b::bigint[], %b::text[]) AS d(id, e)
WHERE i.id = d.id AND i.execution_id = d.e

-- An append changes only the tasks and inputs of its own execution.
-- name: requeue
UPDATE task_queue SET
    status = 'queued', attempt = %s, not_before = now() + make_interval(secs => %s),
    lease_expires_at = NULL, worker_id = NULL, cancel_requested = false, updated_at = now()
WHERE task_id = %s AND execution_id = %s

-- A queued task is canceled outright; a leased one is flagged, and its holder learns it
-- from its next heartbeat.
-- name: cancel_tasks
UPDATE task_queue SET
    status = CASE WHEN status = 'queued' THEN 'canceled' ELSE status END,
    cancel_requested = cancel_requested OR status = 'leased',
    updated_at = now()
WHERE task_id = ANY(%b::text[]) AND execution_id = %s AND status IN ('queued', 'leased')

-- The claim is ONE statement: pick due rows that nobody else is picking (SKIP LOCKED) and
-- lease them. The token grows by one per claim. Every queue time is the database's now().
-- A claim of any execution's tasks (the hot path: a plain statement, a plain plan), and one
-- of only some executions' (a command working for one execution on a shared database).
-- name: claim
WITH picked AS (
    SELECT task_id FROM task_queue
    WHERE status = 'queued' AND pool = %(pool)s AND not_before <= now()
    ORDER BY priority DESC, not_before, queue_order
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE task_queue t SET
    status = 'leased', lease_token = t.lease_token + 1, worker_id = %(worker_id)s,
    lease_expires_at = now() + make_interval(secs => %(lease_s)s), updated_at = now()
FROM picked WHERE t.task_id = picked.task_id
RETURNING t.payload::text, t.attempt, t.lease_token, t.lease_expires_at, t.worker_id,
          t.priority, t.not_before, t.queue_order, t.task_id, t.execution_id

-- name: claim_scoped
WITH picked AS (
    SELECT task_id FROM task_queue
    WHERE status = 'queued' AND pool = %(pool)s AND not_before <= now() AND execution_id = ANY(%(executions)s)
    ORDER BY priority DESC, not_before, queue_order
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE task_queue t SET
    status = 'leased', lease_token = t.lease_token + 1, worker_id = %(worker_id)s,
    lease_expires_at = now() + make_interval(secs => %(lease_s)s), updated_at = now()
FROM picked WHERE t.task_id = picked.task_id
RETURNING t.payload::text, t.attempt, t.lease_token, t.lease_expires_at, t.worker_id,
          t.priority, t.not_before, t.queue_order, t.task_id, t.execution_id

-- A claimed task that cannot be decoded (a poison message) is done at once and reported
-- failed (fatal), so it goes to the dead-letter queue instead of failing every claim.
-- name: poisoned
WITH done AS (
    UPDATE task_queue SET status = 'done', updated_at = now()
    WHERE task_id = %s AND lease_token = %s AND status = 'leased'
    RETURNING execution_id
)
INSERT INTO inbox (execution_id, kind, payload, created_at)
SELECT execution_id, 'outcome', %s::jsonb, now() FROM done

-- The deciding worker's own task: done with its current token (first statement of
-- `complete_and_commit`; no row means the lease is gone and nothing is written).
-- name: done
UPDATE task_queue SET status = 'done', updated_at = now()
WHERE task_id = %s AND lease_token = %s AND status = 'leased'
RETURNING 1

-- Tasks just enqueued by the deciding worker, leased to it in the same transaction.
-- name: lease_ids
UPDATE task_queue SET
    status = 'leased', lease_token = lease_token + 1, worker_id = %s,
    lease_expires_at = now() + make_interval(secs => %s), updated_at = now()
WHERE task_id = ANY(%b::text[]) AND execution_id = %s AND status = 'queued'
RETURNING payload::text, attempt, lease_token, lease_expires_at, worker_id

-- name: heartbeat
UPDATE task_queue SET
    lease_expires_at = now() + make_interval(secs => %s), updated_at = now()
WHERE task_id = %s AND lease_token = %s AND status = 'leased'
RETURNING cancel_requested

-- name: complete
WITH done AS (
    UPDATE task_queue SET status = 'done', updated_at = now()
    WHERE task_id = %s AND lease_token = %s AND status = 'leased'
    RETURNING execution_id
), posted AS (
    INSERT INTO inbox (execution_id, kind, payload, created_at)
    SELECT execution_id, 'outcome', %s::jsonb, now() FROM done
    RETURNING id
)
SELECT id FROM posted

-- `complete` for many reports in one statement.
-- name: complete_many
WITH reports AS (
    SELECT * FROM unnest(%b::text[], %b::bigint[], %b::text[]) AS r(task_id, token, payload)
), done AS (
    UPDATE task_queue t SET status = 'done', updated_at = now()
    FROM reports r
    WHERE t.task_id = r.task_id AND t.lease_token = r.token AND t.status = 'leased'
    RETURNING t.task_id, t.execution_id, r.payload
), posted AS (
    INSERT INTO inbox (execution_id, kind, payload, created_at)
    SELECT execution_id, 'outcome', payload::jsonb, now() FROM done
    RETURNING id
)
SELECT task_id FROM done

-- Leased tasks handed back by their holder (a worker stopping at once): queued again in
-- their old place (not_before kept: they were due already), with lease_token kept (the next
-- claim raises it, fencing the old holder off).
-- name: release
UPDATE task_queue t SET
    status = CASE WHEN t.cancel_requested THEN 'canceled' ELSE 'queued' END,
    worker_id = NULL, lease_expires_at = NULL, updated_at = now()
FROM unnest(%b::text[], %b::bigint[]) AS r(task_id, token)
WHERE t.task_id = r.task_id AND t.lease_token = r.token AND t.status = 'leased'
RETURNING t.task_id

-- name: reap
WITH expired AS (
    SELECT task_id FROM task_queue
    WHERE status = 'leased' AND lease_expires_at < now()
    ORDER BY lease_expires_at, queue_order
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), marked AS (
    UPDATE task_queue t SET status = 'expired', updated_at = now()
    FROM expired WHERE t.task_id = expired.task_id
    RETURNING t.task_id, t.execution_id, t.attempt, t.worker_id
), posted AS (
    INSERT INTO inbox (execution_id, kind, payload, created_at)
    SELECT execution_id, 'lease_expired',
           jsonb_build_object('task_id', task_id, 'attempt', attempt, 'worker_id', worker_id),
           now()
    FROM marked
    RETURNING id
)
SELECT id FROM posted

-- name: reap_scoped
WITH expired AS (
    SELECT task_id FROM task_queue
    WHERE status = 'leased' AND lease_expires_at < now() AND execution_id = ANY(%(executions)s)
    ORDER BY lease_expires_at, queue_order
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), marked AS (
    UPDATE task_queue t SET status = 'expired', updated_at = now()
    FROM expired WHERE t.task_id = expired.task_id
    RETURNING t.task_id, t.execution_id, t.attempt, t.worker_id
), posted AS (
    INSERT INTO inbox (execution_id, kind, payload, created_at)
    SELECT execution_id, 'lease_expired',
           jsonb_build_object('task_id', task_id, 'attempt', attempt, 'worker_id', worker_id),
           now()
    FROM marked
    RETURNING id
)
SELECT id FROM posted

-- name: select_task
SELECT task_id, execution_id, step, pool, priority, status, attempt, lease_token, lease_expires_at, worker_id, cancel_requested, not_before, payload::text FROM task_queue WHERE task_id = %s

-- No row when the execution does not exist (NotFoundError).
-- name: post_input
WITH posted AS (
    INSERT INTO inbox (execution_id, kind, payload, created_at)
    SELECT execution_id, %s, %s::jsonb, now() FROM execution WHERE execution_id = %s
    RETURNING id
)
SELECT id FROM posted

-- name: claim_inputs
WITH picked AS (
    SELECT id FROM inbox
    WHERE (claimed_until IS NULL OR claimed_until < now())
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE inbox i SET
    claimed_by = %(owner)s, claimed_until = now() + make_interval(secs => %(lease_s)s)
FROM picked WHERE i.id = picked.id
RETURNING i.id, i.execution_id, i.kind, i.payload::text, i.created_at

-- name: claim_inputs_scoped
WITH picked AS (
    SELECT id FROM inbox
    WHERE (claimed_until IS NULL OR claimed_until < now()) AND execution_id = ANY(%(executions)s)
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE inbox i SET
    claimed_by = %(owner)s, claimed_until = now() + make_interval(secs => %(lease_s)s)
FROM picked WHERE i.id = picked.id
RETURNING i.id, i.execution_id, i.kind, i.payload::text, i.created_at

-- A timer is an input held (by nobody) until it is due.
-- name: insert_timer
INSERT INTO inbox (execution_id, kind, payload, created_at, claimed_by, claimed_until)
VALUES (%s, 'timer', %s::jsonb, now(), 'timer', now() + make_interval(secs => %s))

-- A task that fails again after a replay updates its row: pending again, first_seen and the
-- replay count kept.
-- name: upsert_dlq
INSERT INTO dlq (message_id, execution_id, step_id, loop_index, loop_key, tool_kind, sink_id, attempts, reason, error_type, last_error, last_stack, first_seen, last_seen, payload, context_excerpt, task, status, replays, discard_reason, updated_at)
VALUES (%s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s, to_timestamp(%s), to_timestamp(%s), %s::jsonb, %s, %s::jsonb, %s, %s, %s, now())
ON CONFLICT (message_id) DO UPDATE SET
    execution_id = excluded.execution_id, step_id = excluded.step_id, loop_index = excluded.loop_index, loop_key = excluded.loop_key, tool_kind = excluded.tool_kind, sink_id = excluded.sink_id, attempts = excluded.attempts, reason = excluded.reason, error_type = excluded.error_type, last_error = excluded.last_error, last_stack = excluded.last_stack, last_seen = excluded.last_seen, payload = excluded.payload, context_excerpt = excluded.context_excerpt, task = excluded.task, status = excluded.status, discard_reason = excluded.discard_reason,
    updated_at = excluded.updated_at

-- name: set_dlq_status
UPDATE dlq SET status = %s, updated_at = now() WHERE message_id = %s

-- Housekeeping of the two tables whose rows are rewritten fastest (see PgQueue.maintain).
-- name: vacuum_queue
VACUUM (SKIP_LOCKED) task_queue, inbox
