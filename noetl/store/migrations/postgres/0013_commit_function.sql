-- 0013: a commit's checks and writes in one function, so that a commit without rarer
-- writes is ONE statement: no BEGIN, no SET LOCAL, no COMMIT around it (an autocommit
-- statement is its own transaction), one parameter per kind of row. The client's cost
-- of a statement is most of a worker's cost of a commit (psycopg's pipeline and
-- parameters); this takes four of five away.
--
-- The checks (formerly the `guard` statement): mark the deciding worker's tasks done
-- ((task id, token) pairs in p_held; none for a plain commit), lock the executions
-- (FOR NO KEY UPDATE, in id order) and refuse (SQLSTATE NT001, nothing written) when a
-- lease is gone (fewer rows done than pairs), an execution is missing or not at the
-- sequence its first append continues ((id, sequence) pairs in p_firsts), or an input
-- decided on ((input id, execution id) pairs in p_inputs) is no longer in the inbox.
-- With all three empty there is nothing to check (a commit that checked already).
--
-- The writes (formerly `write_all`): events, executions, step states and tasks, each a
-- data-modifying CTE over a JSON array of arrays (a row's JSON column, encoded by the
-- client, spliced in as it is). Queue changes are timed by now(), the database clock at
-- the start of the transaction. A task id enqueued again (a step called again) re-queues
-- its row and keeps its lease_token, so the fencing token only grows and an older lease
-- stays fenced off; a new row starts at its execution's token_floor (the highest token
-- of its rows a prune deleted). Tasks flagged leased are leased at once to p_worker (the
-- deciding worker's next tasks) and come back. The inputs decided ((input id, execution
-- id) pairs in p_done) leave the inbox; p_wake notifies idle workers.
--
-- `unnest(ARRAY(...))` gives the planner the estimate of a short list (10 rows, as for
-- an array parameter), so the lookups stay on their keys; the function's statements run
-- on generic plans (planned once a session: their plans are lookups by key either way).
CREATE FUNCTION noetl_commit(
    p_held jsonb, p_firsts jsonb, p_inputs jsonb,
    p_events jsonb, p_execs jsonb, p_steps jsonb, p_tasks jsonb, p_done jsonb,
    p_worker text, p_lease_s float8, p_wake boolean
) RETURNS TABLE (task_id text, payload text, attempt int, lease_token bigint,
                 lease_expires_at timestamptz, worker_id text)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
    stale boolean;
BEGIN
    IF jsonb_array_length(p_held) + jsonb_array_length(p_firsts)
       + jsonb_array_length(p_inputs) > 0 THEN
        WITH h AS (
            SELECT r->>0 AS task_id, (r->>1)::bigint AS token
            FROM unnest(ARRAY(SELECT jsonb_array_elements(p_held))) AS r
        ), u AS (
            SELECT r->>0 AS e, (r->>1)::bigint AS seq
            FROM unnest(ARRAY(SELECT jsonb_array_elements(p_firsts))) AS r
        ), done AS (
            UPDATE task_queue q SET status = 'done', updated_at = now()
            FROM h
            WHERE q.task_id = h.task_id AND q.lease_token = h.token AND q.status = 'leased'
            RETURNING 1
        ), locked AS (
            SELECT execution_id, last_seq FROM execution
            WHERE execution_id = ANY(ARRAY(SELECT e FROM u)) ORDER BY execution_id FOR NO KEY UPDATE
        )
        SELECT (SELECT count(*) FROM done) <> (SELECT count(*) FROM h)
           OR (SELECT count(*) FROM locked) <> (SELECT count(*) FROM u)
           OR EXISTS (SELECT 1 FROM u JOIN locked l ON l.execution_id = u.e WHERE l.last_seq <> u.seq)
           OR EXISTS (
               SELECT 1 FROM unnest(ARRAY(SELECT jsonb_array_elements(p_inputs))) AS d
               WHERE NOT EXISTS (
                   SELECT 1 FROM inbox i WHERE i.id = (d->>0)::bigint AND i.execution_id = d->>1))
        INTO stale;
        IF stale THEN
            RAISE EXCEPTION 'noetl: commit refused: stale' USING ERRCODE = 'NT001';
        END IF;
    END IF;
    IF jsonb_array_length(p_done) > 0 THEN
        DELETE FROM inbox i USING unnest(ARRAY(SELECT jsonb_array_elements(p_done))) AS d
        WHERE i.id = (d->>0)::bigint AND i.execution_id = d->>1;
    END IF;
    IF p_wake THEN
        PERFORM pg_notify('noetl_tasks', '');
    END IF;
    RETURN QUERY
    WITH ev AS (
        INSERT INTO event_log (execution_id, seq, type, ts, step, payload)
        SELECT r->>0, (r->>1)::bigint, r->>2, to_timestamp((r->>3)::float8), r->>4, r->5
        FROM unnest(ARRAY(SELECT jsonb_array_elements(p_events))) AS r
    ), ex AS (
        UPDATE execution x SET
            last_seq = u.last_seq,
            updated_at = u.now,
            status = COALESCE(u.status, x.status),
            finished_at = CASE WHEN u.status IS NULL THEN x.finished_at ELSE u.finished_at END,
            context = COALESCE(u.context, x.context)
        FROM (SELECT r->>0 AS execution_id, (r->>1)::bigint AS last_seq,
                     to_timestamp((r->>2)::float8) AS now, r->>3 AS status,
                     to_timestamp((r->>4)::float8) AS finished_at, (r->>5)::jsonb AS context
              FROM unnest(ARRAY(SELECT jsonb_array_elements(p_execs))) AS r) AS u
        WHERE x.execution_id = u.execution_id
    ), st AS (
        INSERT INTO step_state (execution_id, step, status, updated_at)
        SELECT r->>0, r->>1, r->3, to_timestamp((r->>2)::float8)
        FROM unnest(ARRAY(SELECT jsonb_array_elements(p_steps))) AS r
        ON CONFLICT (execution_id, step) DO UPDATE SET
            status = excluded.status, updated_at = excluded.updated_at
    ), tq AS (
        INSERT INTO task_queue (task_id, execution_id, step, pool, priority, attempt, payload,
                                not_before, status, lease_token, worker_id, lease_expires_at,
                                created_at, updated_at)
        SELECT u.t, u.e, u.st, u.pl, u.pr, u.a, u.p, now() + make_interval(secs => u.d),
               CASE WHEN u.l THEN 'leased' ELSE 'queued' END,
               COALESCE((SELECT x.token_floor FROM execution x WHERE x.execution_id = u.e), 0)
                   + CASE WHEN u.l THEN 1 ELSE 0 END,
               CASE WHEN u.l THEN w.worker_id END,
               CASE WHEN u.l THEN now() + make_interval(secs => w.lease_s) END, now(), now()
        FROM (SELECT r->>0 AS t, r->>1 AS e, r->>2 AS st, r->>3 AS pl, (r->>4)::int AS pr,
                     (r->>5)::int AS a, (r->>6)::float8 AS d, (r->>7)::bool AS l, r->8 AS p
              FROM unnest(ARRAY(SELECT jsonb_array_elements(p_tasks))) AS r) AS u,
             (SELECT p_worker AS worker_id, p_lease_s AS lease_s) AS w
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
    FROM tq WHERE status = 'leased';
END
$fn$;
