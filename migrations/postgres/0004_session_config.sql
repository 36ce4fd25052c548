-- The session's mode, model and model parameters in effect (JSON), as echoed by the
-- agent: part of the execution's recovery identity.
ALTER TABLE executions ADD COLUMN session_config TEXT;
