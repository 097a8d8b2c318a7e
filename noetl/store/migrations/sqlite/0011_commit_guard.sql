-- 0011: nothing to do in SQLite. PostgreSQL's 0011 adds the function that lets a commit
-- be checked and written in one round trip; a SQLite commit has no round trips, and its
-- check is the update of the execution row (noetl.store.sqlite). The version is kept
-- equal in both stores.
SELECT 1;
