-- The PostgreSQL store's own statements (noetl.store.queries): the writes of a commit,
-- the task queue and the inbox, run by noetl.store.postgres, _pg_queue and _pg_dlq.
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

-- A commit's checks, sent ahead of its writes in the same pipeline (one round trip): mark
-- the deciding worker's tasks done (arrays of task ids and tokens; empty for a plain
-- commit), lock the executions as `lock_executions` does, and refuse the commit
-- (`noetl_refuse` raises: the writes behind it are never applied) when a lease is gone
-- (fewer rows done than task ids), an execution is missing or not at the sequence its
-- first append continues (the arrays of ids and sequences), or an input decided on is no
-- longer in the inbox.
-- name: guard
WITH done AS (
    UPDATE task_queue q SET status = 'done', updated_at = now()
    FROM unnest(%b::text[], %b::bigint[]) AS h(task_id, token)
    WHERE q.task_id = h.task_id AND q.lease_token = h.token AND q.status = 'leased'
    RETURNING 1
), locked AS (
    SELECT execution_id, last_seq FROM execution
    WHERE execution_id = ANY(%b::text[]) ORDER BY execution_id FOR NO KEY UPDATE
)
SELECT noetl_refuse('stale')
WHERE (SELECT count(*) FROM done) <> cardinality(%b::text[])
   OR (SELECT count(*) FROM locked) <> cardinality(%b::text[])
   OR EXISTS (
       SELECT 1 FROM unnest(%b::text[], %b::bigint[]) AS u(e, seq)
       JOIN locked l ON l.execution_id = u.e WHERE l.last_seq <> u.seq)
   OR EXISTS (
       SELECT 1 FROM unnest(%b::bigint[], %b::text[]) AS d(id, e)
       WHERE NOT EXISTS (SELECT 1 FROM inbox i WHERE i.id = d.id AND i.execution_id = d.e))

-- Set-based writes: the events, executions, step states and tasks of a whole commit (many
-- executions, many events) in ONE statement, with the rows passed as arrays, each kind of
-- row a data-modifying CTE (run once and to completion whether or not it is read).
-- PostgreSQL's and the client's cost is per statement far more than per row, so a loop of
-- a thousand items costs a few statements per commit.
-- Queue changes are timed by now(): the database clock at the start of the transaction.
-- A task id enqueued again (a step called again) re-queues its row and keeps its
-- lease_token, so the fencing token only grows and an older lease stays fenced off. A new
-- row starts at its execution's token_floor (the highest token of its rows a prune
-- deleted), so that holds across a prune too. Tasks flagged `l` are leased at once to worker %s (the deciding worker's next tasks,
-- `complete_and_commit`): inserted as leased with token 1, or, for a task id enqueued
-- again, leased with its next token; the leased rows come back.
-- name: write_all
WITH ev AS (
    INSERT INTO event_log (execution_id, seq, type, ts, step, payload)
    SELECT e, s, t, ts, st, p::jsonb
    FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::timestamptz[], %b::text[], %b::text[])
        AS u(e, s, t, ts, st, p)
), ex AS (
    UPDATE execution x SET
        last_seq = u.last_seq,
        updated_at = u.now,
        status = COALESCE(u.status, x.status),
        finished_at = CASE WHEN u.status IS NULL THEN x.finished_at ELSE u.finished_at END,
        context = COALESCE(u.context::jsonb, x.context)
    FROM unnest(%b::text[], %b::bigint[], %b::timestamptz[], %b::text[], %b::timestamptz[],
                %b::text[]) AS u(execution_id, last_seq, now, status, finished_at, context)
    WHERE x.execution_id = u.execution_id
), st AS (
    INSERT INTO step_state (execution_id, step, status, updated_at)
    SELECT e, st, s::jsonb, ts
    FROM unnest(%b::text[], %b::text[], %b::text[], %b::timestamptz[]) AS u(e, st, s, ts)
    ON CONFLICT (execution_id, step) DO UPDATE SET
        status = excluded.status, updated_at = excluded.updated_at
), tq AS (
    INSERT INTO task_queue (task_id, execution_id, step, pool, priority, attempt, payload,
                            not_before, status, lease_token, worker_id, lease_expires_at,
                            created_at, updated_at)
    SELECT t, e, st, pl, pr, a, p::jsonb, now() + make_interval(secs => d),
           CASE WHEN l THEN 'leased' ELSE 'queued' END,
           COALESCE((SELECT x.token_floor FROM execution x WHERE x.execution_id = u.e), 0)
               + CASE WHEN l THEN 1 ELSE 0 END,
           CASE WHEN l THEN w.worker_id END,
           CASE WHEN l THEN now() + make_interval(secs => w.lease_s) END, now(), now()
    FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::int[], %b::int[],
                %b::text[], %b::float8[], %b::bool[]) AS u(t, e, st, pl, pr, a, p, d, l),
         (SELECT %s::text AS worker_id, %s::float8 AS lease_s) AS w
    ON CONFLICT (task_id) DO UPDATE SET
        execution_id = excluded.execution_id, step = excluded.step, pool = excluded.pool,
        priority = excluded.priority, status = excluded.status, attempt = excluded.attempt,
        lease_token = task_queue.lease_token
            + CASE WHEN excluded.status = 'leased' THEN 1 ELSE 0 END,
        lease_expires_at = excluded.lease_expires_at, worker_id = excluded.worker_id,
        cancel_requested = false, not_before = excluded.not_before, payload = excluded.payload,
        updated_at = excluded.updated_at
    RETURNING task_id, status, payload::text, attempt, lease_token, lease_expires_at, worker_id
)
SELECT task_id, payload, attempt, lease_token, lease_expires_at, worker_id
FROM tq WHERE status = 'leased'

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
