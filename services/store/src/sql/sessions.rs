//! Session checkpoints (the fenced upsert that only moves forward, and the read) and the
//! fleet-wide claim of one session's open.

use super::connection::{SqlStore, on_pool};
use crate::contract::*;
use crate::records::*;

const CHECKPOINT_COLUMNS: &str = "tenant_id, session_id, execution_id, generation, turn_count, format, raw_bytes, stored_bytes, sha256, body, taken_at_ms";

impl SqlStore {
    pub(super) async fn save_session_checkpoint(&self, c: &SessionCheckpoint) -> StoreResult<bool> {
        let (sql, me) = (&self.shared.statements, self.shared.identity.fence_owner());
        let (outcome, _) = on_pool!(@owner_write self, |pool| sqlx::query(sqlx::AssertSqlSafe(
            sql.save_session_checkpoint.as_str()
        ))
        .bind(&c.tenant_id)
        .bind(&c.session_id)
        .bind(c.execution_id.as_str())
        .bind(c.generation.get())
        .bind(c.turn_count)
        .bind(&c.format)
        .bind(c.raw_bytes)
        .bind(c.stored_bytes)
        .bind(&c.sha256)
        .bind(&c.body)
        .bind(c.taken_at_ms)
        .bind(me)
        .execute(pool)
        .await?
        .rows_affected());
        // A retried upsert that had committed replaces its own row: `true` again.
        Ok(outcome? == 1)
    }

    pub(super) async fn session_checkpoint(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> StoreResult<Option<SessionCheckpoint>> {
        let sql =
            format!("SELECT {CHECKPOINT_COLUMNS} FROM session_checkpoints WHERE tenant_id = $1 AND session_id = $2");
        Ok(on_pool!(self, |pool| sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
            .bind(tenant_id)
            .bind(session_id)
            .fetch_optional(pool)
            .await?))
    }

    pub(super) async fn claim_session_open(
        &self,
        tenant_id: &str,
        session_id: &str,
        claim_id: &str,
        hold: std::time::Duration,
    ) -> StoreResult<bool> {
        let now = self.shared.statements.dialect.now_ms;
        let sql = format!(
            "INSERT INTO session_opens (tenant_id, session_id, claim_id, claimed_by, expires_at_ms) \
             VALUES ($1, $2, $3, $4, {now} + $5) \
             ON CONFLICT (tenant_id, session_id) DO UPDATE SET claim_id = excluded.claim_id, \
             claimed_by = excluded.claimed_by, expires_at_ms = excluded.expires_at_ms \
             WHERE session_opens.claimed_by = excluded.claimed_by \
             OR session_opens.expires_at_ms <= {now} \
             OR NOT EXISTS (SELECT 1 FROM replicas r WHERE r.incarnation = session_opens.claimed_by \
                            AND r.state <> 'ended' AND r.lease_until_ms > {now})"
        );
        let claimed = on_pool!(self, |pool| sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .bind(tenant_id)
            .bind(session_id)
            .bind(claim_id)
            .bind(self.shared.identity.me())
            .bind(millis(hold))
            .execute(pool)
            .await?
            .rows_affected());
        Ok(claimed == 1)
    }

    pub(super) async fn renew_session_open(
        &self,
        tenant_id: &str,
        session_id: &str,
        claim_id: &str,
        hold: std::time::Duration,
    ) -> StoreResult<bool> {
        let now = self.shared.statements.dialect.now_ms;
        let sql = format!(
            "UPDATE session_opens SET expires_at_ms = {now} + $4 \
             WHERE tenant_id = $1 AND session_id = $2 AND claim_id = $3"
        );
        let renewed = on_pool!(self, |pool| sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .bind(tenant_id)
            .bind(session_id)
            .bind(claim_id)
            .bind(millis(hold))
            .execute(pool)
            .await?
            .rows_affected());
        Ok(renewed == 1)
    }

    pub(super) async fn release_session_open(
        &self,
        tenant_id: &str,
        session_id: &str,
        claim_id: &str,
    ) -> StoreResult<()> {
        on_pool!(self, |pool| sqlx::query(
            "DELETE FROM session_opens WHERE tenant_id = $1 AND session_id = $2 AND claim_id = $3"
        )
        .bind(tenant_id)
        .bind(session_id)
        .bind(claim_id)
        .execute(pool)
        .await
        .map(drop)?);
        Ok(())
    }
}

/// A hold in milliseconds, as added to the database's now (never overflowing it).
fn millis(hold: std::time::Duration) -> i64 {
    i64::try_from(hold.as_millis()).unwrap_or(i64::MAX / 2)
}
