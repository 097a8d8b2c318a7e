-- 0017: a start of a cached playbook version is refused when a newer one is registered.
--
-- The server keeps the latest version of each registered playbook it started (so a start
-- by path reads nothing before its `noetl_start`). A row of p_rows may carry, as its 12th
-- element, the version the start took for the latest of its path; when a newer version of
-- that path is registered, the statement raises SQLSTATE NT003 and writes nothing, and the
-- server reads the catalog again. This `noetl_start` takes no lease time either (a start
-- leases nothing at once): it is a function of its own beside 0016's, which servers of
-- schema version 16 go on calling during a rolling upgrade (their rows check nothing).
CREATE FUNCTION noetl_start(
    p_rows jsonb, p_events jsonb, p_execs jsonb, p_steps jsonb, p_tasks jsonb, p_wake boolean
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
    IF EXISTS (
        SELECT 1 FROM jsonb_array_elements(p_rows) AS r
        JOIN playbook AS p ON p.path = r->>2 AND p.version > (r->>11)::int
        WHERE r->>11 IS NOT NULL
    ) THEN
        RAISE EXCEPTION 'noetl: start refused: a newer playbook version is registered'
            USING ERRCODE = 'NT003';
    END IF;
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
        '[]'::jsonb, NULL::text, 0::float8, p_wake);  -- nothing is leased at once
END
$fn$;
