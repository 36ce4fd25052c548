//! Session checkpoints: the fenced upsert that only moves forward, and the read.

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
        .bind(&c.execution_id)
        .bind(c.generation)
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
}
