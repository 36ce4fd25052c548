-- Portable sessions (docs/scale-out.md §6): the agent-side state of a session's home,
-- one row per session, so a session opened on one replica loads or recovers on another.
-- `body` is a gzip-compressed tar (`format`), checked against `sha256` before it is
-- unpacked. A row moves forward only: a newer execution of the session, or a later
-- (generation, turn_count) of the same one.
CREATE TABLE session_checkpoints (
    tenant_id     TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    execution_id  TEXT NOT NULL REFERENCES executions (id),
    generation    BIGINT NOT NULL,
    turn_count    BIGINT NOT NULL,
    format        TEXT NOT NULL,
    raw_bytes     BIGINT NOT NULL,
    stored_bytes  BIGINT NOT NULL,
    sha256        TEXT NOT NULL,
    body          BLOB NOT NULL,
    taken_at_ms   BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, session_id)
);
