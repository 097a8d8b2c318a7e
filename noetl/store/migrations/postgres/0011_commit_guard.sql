-- 0011: a commit's checks made where its rows are, so a commit is one round trip.
-- The `guard` statement (sql/postgres_queue.sql) calls `noetl_refuse` when an execution
-- is not at the sequence its append continues, an input it decided on was consumed by
-- another commit, or the deciding worker's lease is gone. It raises (SQLSTATE NT001),
-- and the transaction with it: the writes sent behind it in the same pipeline are never
-- applied, and the client then finds out why (noetl.store.postgres).
CREATE FUNCTION noetl_refuse(reason text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'noetl: commit refused: %', reason USING ERRCODE = 'NT001';
END
$$;
