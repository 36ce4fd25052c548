-- How the execution's agent process was leased from the pool (JSON: slot, warm or
-- cold, and the time each step took), so GetExecution can show it.
ALTER TABLE executions ADD COLUMN lease TEXT;
