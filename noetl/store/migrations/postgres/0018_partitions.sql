-- 0018: `event_log` and `step_state` partitioned by range of execution id.
--
-- Why: an insert goes to any page the free space map says has room for its row. The
-- pages of a long history, filled with rows of mixed sizes, each keep a little room, so
-- on a database of 1,000,000 finished executions every new event and step row of a run
-- went to a different old page, read from outside shared buffers first (W1 1.10x the
-- time of an empty database). Ids begin with their start time in milliseconds
-- (`new_execution_id`), so a range of ids is a span of time: new executions write to the
-- newest partition, whose free space map knows only its own pages, and a partition
-- whose executions are all pruned is dropped whole.
--
-- Layout: `<table>_before` holds every row written before this migration, ids below the
-- bound of the moment it ran; then one partition per period (`<table>_pYYYYMMDD`, made
-- ahead of time by `noetl_add_partitions`); `<table>_default` takes any other id (an id
-- given by a caller, or one past the partitions made: nothing is refused when the job
-- that makes them has not run). The primary keys, `ON CONFLICT (execution_id, step)`
-- and the foreign keys to `execution` (ON DELETE CASCADE) stay as they were.
--
-- The upgrade reads both tables once (ATTACH checks the old rows against the bound).

-- The first id of the millisecond `t` (UTC): ids are 13 digits of milliseconds then 6.
CREATE FUNCTION noetl_id_at(t timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT lpad(floor(extract(epoch FROM t) * 1000)::bigint::text, 13, '0') || '000000' $$;

-- The time an id bound stands for.
CREATE FUNCTION noetl_id_time(id text) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT to_timestamp(left(id, 13)::bigint / 1000.0) $$;

-- The range partitions of `p_table`: name, lower bound (NULL: MINVALUE), upper bound.
CREATE FUNCTION noetl_partitions(p_table regclass)
RETURNS TABLE (name text, lo text, hi text)
LANGUAGE sql STABLE
AS $$
    SELECT c.relname::text,
           substring(pg_get_expr(c.relpartbound, c.oid) FROM $r$FROM \('([^']*)'\)$r$),
           substring(pg_get_expr(c.relpartbound, c.oid) FROM $r$TO \('([^']*)'\)$r$)
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = p_table
      AND pg_get_expr(c.relpartbound, c.oid) <> 'DEFAULT'
$$;

-- One new partition of `p_table` for ids in [p_lo, p_hi): rows of that range the default
-- partition took meanwhile move into it, so making it never fails on them.
CREATE FUNCTION noetl_add_partition(p_table text, p_name text, p_lo text, p_hi text)
RETURNS void
LANGUAGE plpgsql
AS $fn$
BEGIN
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', p_name, p_table);
    EXECUTE format(
        'WITH moved AS (DELETE FROM %I WHERE execution_id >= %L AND execution_id < %L '
        'RETURNING *) INSERT INTO %I OVERRIDING SYSTEM VALUE SELECT * FROM moved',
        p_table || '_default', p_lo, p_hi, p_name);
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   p_table, p_name, p_lo, p_hi);
END
$fn$;

-- Partitions of `event_log` and `step_state` up to `p_ahead_days` from now, each spanning
-- `p_days` (whole days from midnight UTC; a week starts on Monday), the first from the
-- newest bound;
-- returns the names made. One caller at a time (a transaction-scoped advisory lock).
CREATE FUNCTION noetl_add_partitions(p_days int, p_ahead_days int)
RETURNS SETOF text
LANGUAGE plpgsql
SET lock_timeout = '2s'
AS $fn$
DECLARE
    tbl text;
    bound text;
    upto text := noetl_id_at(now() + make_interval(days => p_ahead_days));
    days int := greatest(1, p_days);
    start_ts timestamptz;
    next_ts timestamptz;
    next_bound text;
    part text;
BEGIN
    PERFORM pg_advisory_xact_lock(7957690617292484724);  -- the bytes of "noetl-pt"
    FOREACH tbl IN ARRAY ARRAY['event_log', 'step_state'] LOOP
        SELECT max(p.hi) INTO bound FROM noetl_partitions(tbl::regclass) AS p;
        IF bound IS NULL OR bound !~ '^[0-9]{19}$' THEN
            RAISE EXCEPTION 'noetl: % has no numeric upper bound to add partitions after', tbl;
        END IF;
        WHILE bound < upto LOOP
            start_ts := noetl_id_time(bound);
            -- the next multiple of `days` days from Monday 1970-01-05, after start_ts
            next_ts := to_timestamp(
                (floor((extract(epoch FROM start_ts) - 345600) / (days * 86400)) + 1)
                * days * 86400 + 345600);
            next_bound := noetl_id_at(next_ts);
            part := tbl || '_p' || to_char(start_ts AT TIME ZONE 'UTC', 'YYYYMMDD');
            PERFORM noetl_add_partition(tbl, part, bound, next_bound);
            RETURN NEXT part;
            bound := next_bound;
        END LOOP;
    END LOOP;
END
$fn$;

-- Drop the partitions wholly before `p_before` whose executions are all pruned (or gone):
-- what is left in them is no one's history. Returns the names dropped. A drop locks the
-- whole table for a moment, waiting at most 2 s for the commits in flight (else it fails,
-- and the next pass tries again).
CREATE FUNCTION noetl_drop_partitions(p_before text)
RETURNS SETOF text
LANGUAGE plpgsql
SET lock_timeout = '2s'
AS $fn$
DECLARE
    tbl text;
    p record;
BEGIN
    PERFORM pg_advisory_xact_lock(7957690617292484724);
    FOREACH tbl IN ARRAY ARRAY['event_log', 'step_state'] LOOP
        FOR p IN SELECT * FROM noetl_partitions(tbl::regclass) AS x
                 WHERE x.hi <= p_before ORDER BY x.hi LOOP
            -- first the lock: no row of a late execution goes in between the look and the drop
            EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', p.name);
            CONTINUE WHEN EXISTS (
                SELECT 1 FROM execution e
                WHERE e.execution_id < p.hi AND (p.lo IS NULL OR e.execution_id >= p.lo)
                  AND e.pruned_at IS NULL);
            EXECUTE format('DROP TABLE %I', p.name);
            RETURN NEXT p.name;
        END LOOP;
    END LOOP;
END
$fn$;

-- event_log
ALTER TABLE event_log RENAME TO event_log_before;
ALTER TABLE event_log_before RENAME CONSTRAINT event_log_pkey TO event_log_before_pkey;
CREATE TABLE event_log (
    execution_id text NOT NULL REFERENCES execution (execution_id) ON DELETE CASCADE,
    seq          bigint NOT NULL CONSTRAINT event_log_seq_check CHECK (seq > 0),
    type         text NOT NULL,
    ts           timestamptz NOT NULL,
    step         text,
    payload      jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (execution_id, seq)
) PARTITION BY RANGE (execution_id);
CREATE TABLE event_log_default PARTITION OF event_log DEFAULT;

-- step_state: its created_order goes on from the old table's
ALTER TABLE step_state RENAME TO step_state_before;
ALTER TABLE step_state_before RENAME CONSTRAINT step_state_pkey TO step_state_before_pkey;
CREATE TABLE step_state (
    execution_id  text NOT NULL REFERENCES execution (execution_id) ON DELETE CASCADE,
    step          text NOT NULL,
    status        jsonb NOT NULL,
    updated_at    timestamptz NOT NULL,
    created_order bigint GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (execution_id, step)
) PARTITION BY RANGE (execution_id);
CREATE TABLE step_state_default PARTITION OF step_state DEFAULT;
SELECT setval(pg_get_serial_sequence('step_state', 'created_order'),
              COALESCE((SELECT max(created_order) FROM step_state_before), 0) + 1, false);

-- The old tables become the partitions below the bound of this moment. A row above it
-- (an id a caller gave, a clock ahead) moves to the new table first, to the default.
DO $do$
DECLARE
    bound text := noetl_id_at(now());
BEGIN
    WITH moved AS (DELETE FROM event_log_before WHERE execution_id >= bound RETURNING *)
    INSERT INTO event_log SELECT * FROM moved;
    WITH moved AS (DELETE FROM step_state_before WHERE execution_id >= bound RETURNING *)
    INSERT INTO step_state OVERRIDING SYSTEM VALUE SELECT * FROM moved;
    ALTER TABLE step_state_before ALTER COLUMN created_order DROP IDENTITY;
    EXECUTE format('ALTER TABLE event_log ATTACH PARTITION event_log_before '
                   'FOR VALUES FROM (MINVALUE) TO (%L)', bound);
    EXECUTE format('ALTER TABLE step_state ATTACH PARTITION step_state_before '
                   'FOR VALUES FROM (MINVALUE) TO (%L)', bound);
END
$do$;

-- The first partitions: a week each, two weeks ahead (the server's job makes the rest,
-- by its `db.partition_days`).
SELECT noetl_add_partitions(7, 14);
