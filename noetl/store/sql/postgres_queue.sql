-- The PostgreSQL store's own statements (noetl.store.queries): the writes of a commit,
-- the task queue and the inbox, run by noetl.store.postgres, _pg_queue and _pg_dlq.
-- Positional parameters (%s; %b: binary, the arrays of an `unnest`).

-- The newest version of a playbook, checked by a start that took one for the latest.
-- name: newest_version
SELECT max(version) FROM playbook WHERE path = %(path)s

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

-- A commit's checks and writes: events, executions, step states, tasks, the inputs
-- decided (migrations/postgres/0013_commit_function.sql). Each kind of row is the JSON
-- text of an array of arrays (`_pg_commit.json_rows`): psycopg dumps a Python list
-- element by element, this is one C call a row.
-- name: commit
SELECT * FROM noetl_commit(%s::jsonb, %s::jsonb, %s::jsonb, %s::jsonb, %s::jsonb, %s::jsonb,
                           %s::jsonb, %s::jsonb, %s::text, %s::float8, %s::boolean)

-- New executions with their first appends (migrations/postgres/0017_start_latest.sql).
-- name: start
SELECT * FROM noetl_start(%s::jsonb, %s::jsonb, %s::jsonb, %s::jsonb, %s::jsonb, %s::boolean)

-- The (id, execution) pairs of a commit's consumed inputs that are no longer in the inbox.
-- name: consumed_inputs
SELECT d.id, d.e FROM unnest(%b::bigint[], %b::text[]) AS d(id, e)
WHERE NOT EXISTS (SELECT 1 FROM inbox i WHERE i.id = d.id AND i.execution_id = d.e)

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
      -- NULL: every execution's; otherwise only these executions' leases
      AND (%(executions)s::text[] IS NULL OR execution_id = ANY(%(executions)s::text[]))
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

-- The partitions of event_log and step_state (migration 0018's functions; see
-- noetl.store.managers.partitions). Drops: every partition wholly before now whose
-- executions are all pruned.
-- name: add_partitions
SELECT noetl_add_partitions(%(period)s, %(ahead)s)

-- name: drop_partitions
SELECT noetl_drop_partitions(noetl_id_at(now()))
