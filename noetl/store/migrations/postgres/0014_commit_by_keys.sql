-- 0014: `noetl_commit` finds every row it touches by its key, whatever the planner thinks
-- of a table's size. The function's plans are generic and kept for the session, made from
-- the statistics of the moment: on a new database (an empty `execution` table, estimated
-- at 290 rows), the update of the executions' rows joined them by hash over a sequential
-- scan of the whole table, and went on doing so as the table grew until an ANALYZE
-- replanned it (3,000 executions of a five-step playbook read 6.9 million execution rows).
-- Every statement of the function is given the keys of its rows (task ids, execution
-- ids, inbox ids), each with an index, so a sequential scan is never the plan it needs.
ALTER FUNCTION noetl_commit(jsonb, jsonb, jsonb, jsonb, jsonb, jsonb, jsonb, jsonb, text,
                            float8, boolean)
    SET enable_seqscan = off;
