-- Every resource carries tenant_id; every execution carries its generation (the one fence).
-- JSON is kept as TEXT so that both backends share one SQL dialect; times are Unix milliseconds.

CREATE TABLE executions (
    id               TEXT PRIMARY KEY,
    tenant_id        TEXT NOT NULL,
    state            TEXT NOT NULL,
    generation       BIGINT NOT NULL,
    workspace        TEXT NOT NULL,
    session_id       TEXT,
    active_turn_id   TEXT,
    turn_count       BIGINT NOT NULL DEFAULT 0,
    pid              BIGINT,
    exit_code        BIGINT,
    exit_signal      BIGINT,
    failure_reason   TEXT,
    failure_message  TEXT,
    acked_sequence   BIGINT NOT NULL DEFAULT 0,
    created_at_ms    BIGINT NOT NULL,
    updated_at_ms    BIGINT NOT NULL
);
CREATE INDEX executions_by_tenant ON executions (tenant_id, id);

CREATE TABLE turns (
    id               TEXT PRIMARY KEY,
    execution_id     TEXT NOT NULL REFERENCES executions (id),
    tenant_id        TEXT NOT NULL,
    generation       BIGINT NOT NULL,
    turn_number      BIGINT NOT NULL,
    state            TEXT NOT NULL,
    stop_reason      TEXT,
    failure_reason   TEXT,
    failure_message  TEXT,
    started_at_ms    BIGINT NOT NULL,
    ended_at_ms      BIGINT,
    UNIQUE (execution_id, turn_number)
);

CREATE TABLE interactions (
    id                  TEXT PRIMARY KEY,
    execution_id        TEXT NOT NULL REFERENCES executions (id),
    tenant_id           TEXT NOT NULL,
    generation          BIGINT NOT NULL,
    turn_id             TEXT NOT NULL REFERENCES turns (id),
    native_request_id   TEXT NOT NULL,
    kind                TEXT NOT NULL,
    state               TEXT NOT NULL,
    etag                TEXT NOT NULL,
    request             TEXT NOT NULL,
    outcome             TEXT,
    answer_request_id   TEXT,
    answer_fingerprint  TEXT,
    reason              TEXT,
    delivery            TEXT,
    replay_allowed      BOOLEAN NOT NULL DEFAULT 0,
    created_at_ms       BIGINT NOT NULL,
    updated_at_ms       BIGINT NOT NULL,
    UNIQUE (execution_id, generation, native_request_id)
);
CREATE INDEX interactions_by_tenant ON interactions (tenant_id, id);

CREATE TABLE events (
    execution_id     TEXT NOT NULL REFERENCES executions (id),
    sequence         BIGINT NOT NULL,
    event_id         TEXT NOT NULL UNIQUE,
    generation       BIGINT NOT NULL,
    turn_id          TEXT,
    item_id          TEXT,
    event_type       TEXT NOT NULL,
    priority         BIGINT NOT NULL,
    schema_version   BIGINT NOT NULL,
    emitted_at_ms    BIGINT NOT NULL,
    payload          TEXT NOT NULL,
    PRIMARY KEY (execution_id, sequence)
);

-- Digests only: a request body may hold credentials.
CREATE TABLE idempotency_keys (
    tenant_id        TEXT NOT NULL,
    operation        TEXT NOT NULL,
    request_id       TEXT NOT NULL,
    request_digest   TEXT NOT NULL,
    state            TEXT NOT NULL,
    response         TEXT,
    created_at_ms    BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, operation, request_id)
);
