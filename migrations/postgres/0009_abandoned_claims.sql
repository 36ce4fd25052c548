-- A surviving replica looks for the in-flight call keys of a replica whose lease ended,
-- on every takeover scan: a partial index keeps that to the few keys in flight.
CREATE INDEX idempotency_keys_in_flight ON idempotency_keys (claimed_by) WHERE state = 'in_flight';
