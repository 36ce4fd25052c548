-- Per-execution approval policy and the wait limit after which a pending question or
-- plan is handed off durably.
ALTER TABLE executions ADD COLUMN approval_policy TEXT NOT NULL DEFAULT 'ask';
ALTER TABLE executions ADD COLUMN interaction_wait_limit_ms BIGINT NOT NULL DEFAULT 1800000;
