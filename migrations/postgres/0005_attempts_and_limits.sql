-- Attempt attribution and bounds before spend. The credential's name (never its value)
-- and the configuration in effect are recorded on each turn with the usage the agent
-- reported (JSON; NULL when it reported none: unknown, never zero). An execution keeps
-- its limits (NULL: unbounded) and the active time its turns have used.
ALTER TABLE executions ADD COLUMN credential_name TEXT;
ALTER TABLE executions ADD COLUMN turn_deadline_ms BIGINT;
ALTER TABLE executions ADD COLUMN max_turns BIGINT;
ALTER TABLE executions ADD COLUMN max_active_ms BIGINT;
ALTER TABLE executions ADD COLUMN active_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE turns ADD COLUMN credential_name TEXT;
ALTER TABLE turns ADD COLUMN session_config TEXT;
ALTER TABLE turns ADD COLUMN usage TEXT;
CREATE INDEX turns_by_execution ON turns (execution_id, turn_number);
