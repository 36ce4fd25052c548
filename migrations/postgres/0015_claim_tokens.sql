-- Each call's claim of an idempotency key carries a token of its own: a release names it, so
-- a call whose claim committed as its reply was lost, and which lets go of it later, never
-- drops the claim a retry in the same process has taken on since (it holds another token).
-- Claims made before this carry none ('').
ALTER TABLE idempotency_keys ADD COLUMN claim_token TEXT NOT NULL DEFAULT '';
