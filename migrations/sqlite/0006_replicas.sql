-- Replicas (docs/scale-out.md §1): each serving process registers an incarnation (UUIDv7,
-- minted at start-up) under its replica name; its lease is renewed by a heartbeat and
-- measured on the database's clock. Executions and in-flight idempotency keys name the
-- incarnation that owns them, so a replica's start-up settles only its own predecessors'
-- work. The '' incarnation owns the rows written before replicas existed.
CREATE TABLE replicas (
    incarnation      TEXT PRIMARY KEY,
    name             TEXT NOT NULL,
    address          TEXT,
    state            TEXT NOT NULL,
    capacity         TEXT NOT NULL,
    started_at_ms    BIGINT NOT NULL,
    heartbeat_at_ms  BIGINT NOT NULL,
    lease_until_ms   BIGINT NOT NULL
);
CREATE INDEX replicas_by_name ON replicas (name);
ALTER TABLE executions ADD COLUMN owner_incarnation TEXT NOT NULL DEFAULT '';
CREATE INDEX executions_by_owner ON executions (owner_incarnation, state);
ALTER TABLE idempotency_keys ADD COLUMN claimed_by TEXT NOT NULL DEFAULT '';
INSERT INTO replicas (incarnation, name, address, state, capacity, started_at_ms, heartbeat_at_ms, lease_until_ms)
VALUES ('', 'pre-scale-out', NULL, 'ended', '{}', 0, 0, 0);
