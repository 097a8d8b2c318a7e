-- 0012: the event log's index by (execution_id, type) goes. Nothing reads the log by
-- type (every read is by execution and sequence, the primary key), and every event
-- written paid for it: one more index entry, and its WAL, per event.
DROP INDEX IF EXISTS event_log_type_idx;
