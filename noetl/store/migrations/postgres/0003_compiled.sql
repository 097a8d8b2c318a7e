-- 0003: the validated playbook of an execution as JSON (its model), written once when the
-- execution is created, so a process deciding for it need not parse the YAML again.
-- NULL for executions created before this migration: they are parsed from the text.
-- Mirrors migrations/sqlite/0003_compiled.sql.
ALTER TABLE execution_input ADD COLUMN compiled text;
