//! Idempotency keys: a claim per (tenant, operation, request id) holding the request's
//! digest, completed with the response a retry gets back.

use super::connection::{SqlStore, on_pool};
use crate::contract::*;
use crate::records::*;

/// A claim's parameters (`Statements::claim_idempotency`), bound onto `$query` in their
/// order: `$key` with the request's `$digest`, for `$me`'s call holding `$token`.
macro_rules! bind_claim_idempotency {
    ($query:expr, $key:expr, $digest:expr, $me:expr, $token:expr) => {{
        let key: &$crate::records::IdempotencyKey = $key;
        let token: &$crate::records::ClaimToken = $token;
        $query
            .bind(&key.tenant_id)
            .bind(&key.operation)
            .bind(&key.request_id)
            .bind($digest)
            .bind($crate::records::now_ms())
            .bind($me)
            .bind(token.as_str())
    }};
}
pub(super) use bind_claim_idempotency;

/// The claim of a free key for `$me`'s call holding `$token`, run on `$executor` (a pool or
/// an open transaction); evaluates to the rows affected (0: the key, or the tenant's
/// request id, is taken).
macro_rules! claim_idempotency_on {
    ($executor:expr, $sql:expr, $key:expr, $digest:expr, $me:expr, $token:expr) => {{
        let query = sqlx::query(sqlx::AssertSqlSafe($sql.claim_idempotency.as_str()));
        $crate::sql::idempotency::bind_claim_idempotency!(query, $key, $digest, $me, $token)
            .execute($executor)
            .await?
            .rows_affected()
    }};
}
pub(super) use claim_idempotency_on;

/// A completion's parameters (`Statements::complete_idempotency`), bound onto `$query` in
/// their order: `$key` completed with `$response` by `$me`.
macro_rules! bind_complete_idempotency {
    ($query:expr, $key:expr, $response:expr, $me:expr) => {{
        let key: &$crate::records::IdempotencyKey = $key;
        let response: &serde_json::Value = $response;
        $query
            .bind(&key.tenant_id)
            .bind(&key.operation)
            .bind(&key.request_id)
            .bind(response.to_string())
            .bind($me)
    }};
}
pub(super) use bind_complete_idempotency;

/// The completion of `$me`'s own claim while its lease is live, run on `$executor`;
/// evaluates to the rows affected (0: not `$me`'s to complete).
macro_rules! complete_idempotency_on {
    ($executor:expr, $sql:expr, $key:expr, $response:expr, $me:expr) => {{
        let query = sqlx::query(sqlx::AssertSqlSafe($sql.complete_idempotency.as_str()));
        $crate::sql::idempotency::bind_complete_idempotency!(query, $key, $response, $me)
            .execute($executor)
            .await?
            .rows_affected()
    }};
}
pub(super) use complete_idempotency_on;

/// Attempts to claim a key that keeps vanishing between the insert that finds it and the
/// read of its state, before the claim reports it busy.
const CLAIM_ATTEMPTS: usize = 3;

impl SqlStore {
    pub(super) async fn claim_idempotency(
        &self,
        key: &IdempotencyKey,
        request_digest: &str,
        token: &ClaimToken,
    ) -> StoreResult<IdempotencyClaim> {
        // The key can vanish between the insert that found it and the read (released after
        // a transient failure, or pruned by retention): it is free then, so claim it again.
        for _ in 0..CLAIM_ATTEMPTS {
            match self.try_claim_idempotency(key, request_digest, token).await? {
                Some(claim) => return Ok(claim),
                None => continue,
            }
        }
        // Claimed and freed by others on every attempt: busy, as if in flight.
        Ok(IdempotencyClaim::InFlight)
    }

    /// One attempt: `None` when the key existed at the insert and was gone at the read.
    async fn try_claim_idempotency(
        &self,
        key: &IdempotencyKey,
        request_digest: &str,
        token: &ClaimToken,
    ) -> StoreResult<Option<IdempotencyClaim>> {
        let sql = &self.shared.statements;
        let me = self.shared.identity.me();
        let inserted = on_pool!(self, |pool| claim_idempotency_on!(
            pool,
            sql,
            key,
            request_digest,
            me,
            token
        ));
        if inserted == 1 {
            return Ok(Some(IdempotencyClaim::Claimed));
        }
        self.find_idempotency(key, request_digest).await
    }

    /// What the key holds for a call with `request_digest`, without claiming it: `None` while
    /// it is free.
    pub(super) async fn find_idempotency(
        &self,
        key: &IdempotencyKey,
        request_digest: &str,
    ) -> StoreResult<Option<IdempotencyClaim>> {
        // The id is the tenant's, whatever the RPC: used by another one, it is another body.
        let row: Option<(String, String, String, Option<String>, String)> = on_pool!(self, |pool| sqlx::query_as(
            "SELECT operation, request_digest, state, response, claimed_by FROM idempotency_keys \
             WHERE tenant_id = $1 AND request_id = $2"
        )
        .bind(&key.tenant_id)
        .bind(&key.request_id)
        .fetch_optional(pool)
        .await?);
        Ok(row.map(
            |(operation, digest, state, response, claimed_by)| match (digest, state, response) {
                (held, _, _) if operation != key.operation || held != request_digest => {
                    IdempotencyClaim::DigestMismatch { held }
                }
                (_, state, Some(response)) if state == "done" => {
                    IdempotencyClaim::Completed(serde_json::from_str(&response).unwrap_or(serde_json::Value::Null))
                }
                _ if self.shared.identity.is_me(&claimed_by) => IdempotencyClaim::InFlightHere,
                _ => IdempotencyClaim::InFlight,
            },
        ))
    }

    pub(super) async fn complete_idempotency(
        &self,
        key: &IdempotencyKey,
        response: &serde_json::Value,
    ) -> StoreResult<bool> {
        let sql = &self.shared.statements;
        let me = self.shared.identity.me();
        let completed = on_pool!(self, |pool| complete_idempotency_on!(pool, sql, key, response, me));
        Ok(completed == 1)
    }

    pub(super) async fn adopt_idempotency(&self, key: &IdempotencyKey, token: &ClaimToken) -> StoreResult<bool> {
        let me = self.shared.identity.me();
        if !self.shared.identity.is_me(me) {
            return Ok(false);
        }
        let adopted = on_pool!(self, |pool| {
            sqlx::query(
                "UPDATE idempotency_keys SET claim_token = $4 \
                 WHERE tenant_id = $1 AND operation = $2 AND request_id = $3 \
                 AND state = 'in_flight' AND claimed_by = $5",
            )
            .bind(&key.tenant_id)
            .bind(&key.operation)
            .bind(&key.request_id)
            .bind(token.as_str())
            .bind(me)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(adopted == 1)
    }

    pub(super) async fn release_idempotency(&self, key: &IdempotencyKey, token: &ClaimToken) -> StoreResult<()> {
        let me = self.shared.identity.me();
        on_pool!(self, |pool| {
            sqlx::query(
                "DELETE FROM idempotency_keys WHERE tenant_id = $1 AND operation = $2 AND request_id = $3 \
                 AND state = 'in_flight' AND claimed_by = $4 AND claim_token = $5",
            )
            .bind(&key.tenant_id)
            .bind(&key.operation)
            .bind(&key.request_id)
            .bind(me)
            .bind(token.as_str())
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(())
    }

    pub(super) async fn complete_abandoned_idempotency(
        &self,
        claimed_by: &str,
        response: &serde_json::Value,
    ) -> StoreResult<u64> {
        // Never a live incarnation's: its calls are still running.
        let sql = format!(
            "UPDATE idempotency_keys SET state = 'done', response = $1 \
             WHERE state = 'in_flight' AND claimed_by = $2 AND NOT {live}",
            live = self.shared.statements.dialect.live_lease("$2")
        );
        Ok(on_pool!(self, |pool| sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .bind(response.to_string())
            .bind(claimed_by)
            .execute(pool)
            .await?
            .rows_affected()))
    }

    pub(super) async fn prune_idempotency(&self, created_before_ms: i64, limit: i64) -> StoreResult<u64> {
        Ok(on_pool!(self, |pool| sqlx::query(
            "DELETE FROM idempotency_keys WHERE (tenant_id, operation, request_id) IN \
             (SELECT tenant_id, operation, request_id FROM idempotency_keys \
              WHERE state = 'done' AND created_at_ms < $1 ORDER BY created_at_ms LIMIT $2)"
        )
        .bind(created_before_ms)
        .bind(limit)
        .execute(pool)
        .await?
        .rows_affected()))
    }
}
