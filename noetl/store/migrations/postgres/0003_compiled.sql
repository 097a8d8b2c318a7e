-- 0003: the validated playbook of an execution as JSON (its model), written once when the
-- execution is created, so a process deciding for it need not parse the YAML again.
-- NULL for executions created before this migration: they are parsed from the text.
-- Mirrors migrations/sqlite/0003_compiled.sql.
ALTER TABLE execution_input ADD COLUMN compiled text;

-- The queue and the inbox are rewritten row by row at a high rate (queued -> leased ->
-- done; posted -> held -> deleted): vacuum them after a fixed number of dead rows, not a
-- fraction of the table, so claims do not slow down as dead index entries pile up.
ALTER TABLE task_queue SET (autovacuum_vacuum_scale_factor = 0.0,
                            autovacuum_vacuum_threshold = 5000,
                            autovacuum_analyze_scale_factor = 0.0,
                            autovacuum_analyze_threshold = 5000,
                            autovacuum_vacuum_cost_delay = 0);
ALTER TABLE inbox SET (autovacuum_vacuum_scale_factor = 0.0,
                       autovacuum_vacuum_threshold = 5000,
                       autovacuum_analyze_scale_factor = 0.0,
                       autovacuum_analyze_threshold = 5000,
                       autovacuum_vacuum_cost_delay = 0);
