-- A request id names one call of a tenant, whatever its RPC: the same id sent to another
-- RPC is another body, refused as reused (service-contract.md, "the same id with another
-- body is rejected"). Keys were unique per operation; of two that share an id, the newer stays.
DELETE FROM idempotency_keys
WHERE EXISTS (
    SELECT 1 FROM idempotency_keys AS newer
    WHERE newer.tenant_id = idempotency_keys.tenant_id
      AND newer.request_id = idempotency_keys.request_id
      AND (newer.created_at_ms > idempotency_keys.created_at_ms
           OR (newer.created_at_ms = idempotency_keys.created_at_ms AND newer.operation > idempotency_keys.operation))
);
CREATE UNIQUE INDEX idempotency_keys_by_request ON idempotency_keys (tenant_id, request_id);
