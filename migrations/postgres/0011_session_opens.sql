-- One open of a recorded session at a time across the fleet (docs/scale-out.md R8b): a
-- load or a recovery holds its session's row while it opens it, so two replicas opening
-- one session at the same instant cannot both pass the check that no live execution has
-- it. A claim is free again once released, once its replica's lease is over, or once its
-- hold (on the database's clock) has passed.
CREATE TABLE session_opens (
    tenant_id      TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    claim_id       TEXT NOT NULL,
    claimed_by     TEXT NOT NULL,
    expires_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, session_id)
);
