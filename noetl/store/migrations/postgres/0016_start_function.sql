-- 0016: new executions and their first appends in ONE statement, as 0013 made a commit one.
--
-- A start (or a group of starts that arrived together) was a transaction of an insert per
-- execution between BEGIN, SET LOCAL and COMMIT, with `noetl_commit` for their first
-- appends: five statements and more, each a write to the socket and a turn of psycopg's
-- pipeline in the server, most of a start's cost there. `noetl_start` inserts every
-- execution of p_rows (a JSON array of arrays: execution id, playbook name, path, status,
-- context, parent id, created_at, updated_at, finished_at (epoch seconds), playbook text,
-- compiled model) with its input row, then applies their first appends with `noetl_commit`
-- (nothing to check: nobody else can see the new rows). An id that exists already inserts
-- nothing and raises SQLSTATE NT002, and the statement, its own transaction, writes nothing.
CREATE FUNCTION noetl_start(
    p_rows jsonb, p_events jsonb, p_execs jsonb, p_steps jsonb, p_tasks jsonb,
    p_lease_s float8, p_wake boolean
) RETURNS TABLE (task_id text, payload text, attempt int, lease_token bigint,
                 lease_expires_at timestamptz, worker_id text)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $fn$
#variable_conflict use_column
DECLARE
    inserted bigint;
BEGIN
    WITH r AS (
        SELECT r FROM unnest(ARRAY(SELECT jsonb_array_elements(p_rows))) AS r
    ), e AS (
        INSERT INTO execution (execution_id, playbook_name, playbook_path, status, context,
                               parent_execution_id, last_seq, created_at, updated_at,
                               finished_at)
        SELECT r->>0, r->>1, r->>2, r->>3, r->4, r->>5, 0, to_timestamp((r->>6)::float8),
               to_timestamp((r->>7)::float8), to_timestamp((r->>8)::float8)
        FROM r
        ON CONFLICT (execution_id) DO NOTHING
        RETURNING execution_id
    ), i AS (
        INSERT INTO execution_input (execution_id, playbook_text, compiled)
        SELECT e.execution_id, r.r->>9, r.r->>10 FROM e JOIN r ON r.r->>0 = e.execution_id
        RETURNING 1
    )
    SELECT count(*) FROM i INTO inserted;
    IF inserted <> jsonb_array_length(p_rows) THEN
        RAISE EXCEPTION 'noetl: start refused: an execution id exists' USING ERRCODE = 'NT002';
    END IF;
    RETURN QUERY SELECT * FROM noetl_commit(
        '[]'::jsonb, '[]'::jsonb, '[]'::jsonb, p_events, p_execs, p_steps, p_tasks,
        '[]'::jsonb, NULL::text, p_lease_s, p_wake);
END
$fn$;
