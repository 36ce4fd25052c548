//! Turn rows: insert and settlement (compare-and-set from `running`), both fenced by
//! the execution's current generation; reads.

use super::connection::{SqlStore, inserted_unless_fenced, on_pool};
use super::rows::TurnRow;
use crate::contract::*;
use crate::records::*;

const TURN_COLUMNS: &str = "id, execution_id, tenant_id, generation, turn_number, state, stop_reason, failure_reason, failure_message, started_at_ms, ended_at_ms, credential_name, session_config, usage";

/// The turn settlement (compare-and-set from `running`, behind the owner fence) run on
/// `$executor`, a pool or an open transaction, as `$me`; evaluates to the rows affected.
macro_rules! settle_turn_on {
    ($executor:expr, $sql:expr, $t:expr, $me:expr) => {{
        let t: &$crate::records::TurnRecord = $t;
        sqlx::query(sqlx::AssertSqlSafe($sql.settle_turn.as_str()))
            .bind(t.state.as_str())
            .bind(&t.stop_reason)
            .bind(&t.failure_reason)
            .bind(&t.failure_message)
            .bind(t.ended_at_ms)
            .bind($crate::sql::rows::usage_text(&t.usage))
            .bind(t.id.as_str())
            .bind(t.generation.get())
            .bind($me)
            .execute($executor)
            .await?
            .rows_affected()
    }};
}
pub(super) use settle_turn_on;

/// The turn insert, behind the owner fence, run on `$executor` (a pool or an open
/// transaction) as `$me`; evaluates to the rows affected (0: fenced).
macro_rules! insert_turn_on {
    ($executor:expr, $sql:expr, $t:expr, $me:expr) => {{
        let t: &$crate::records::TurnRecord = $t;
        sqlx::query(sqlx::AssertSqlSafe($sql.insert_turn.as_str()))
            .bind(t.id.as_str())
            .bind(t.execution_id.as_str())
            .bind(&t.tenant_id)
            .bind(t.generation.get())
            .bind(t.turn_number)
            .bind(t.state.as_str())
            .bind(&t.stop_reason)
            .bind(&t.failure_reason)
            .bind(&t.failure_message)
            .bind(t.started_at_ms)
            .bind(t.ended_at_ms)
            .bind(&t.credential_name)
            .bind($crate::sql::rows::config_text(&t.session_config))
            .bind($crate::sql::rows::usage_text(&t.usage))
            .bind($me)
            .execute($executor)
            .await?
            .rows_affected()
    }};
}
pub(super) use insert_turn_on;

impl SqlStore {
    pub(super) async fn insert_turn(&self, t: &TurnRecord) -> StoreResult<()> {
        let (sql, me) = (&self.shared.statements, self.shared.identity.fence_owner());
        let (outcome, retried) = on_pool!(@owner_write self, |pool| insert_turn_on!(pool, sql, t, me));
        inserted_unless_fenced(outcome, retried)
    }

    pub(super) async fn settle_turn(&self, t: &TurnRecord) -> StoreResult<bool> {
        let (sql, me) = (&self.shared.statements, self.shared.identity.fence_owner());
        let (outcome, retried) = on_pool!(@owner_write self, |pool| settle_turn_on!(pool, sql, t, me));
        match outcome? {
            1 => Ok(true),
            // The attempt that failed may have committed: then the row is already ours.
            _ if retried => Ok(self.turn_state(&t.id, t.generation).await?.as_deref() == Some(t.state.as_str())),
            _ => Ok(false),
        }
    }

    pub(super) async fn get_turn(&self, tenant_id: &str, id: &str) -> StoreResult<Option<TurnRecord>> {
        let sql = format!("SELECT {TURN_COLUMNS} FROM turns WHERE tenant_id = $1 AND id = $2");
        Ok(on_pool!(self, |pool| sqlx::query_as::<_, TurnRow>(sqlx::AssertSqlSafe(
            sql.clone()
        ))
        .bind(tenant_id)
        .bind(id)
        .fetch_optional(pool)
        .await?)
        .map(Into::into))
    }

    pub(super) async fn list_turns(
        &self,
        tenant_id: &str,
        execution_id: &str,
        after_number: i64,
        limit: i64,
    ) -> StoreResult<Vec<TurnRecord>> {
        let sql = format!(
            "SELECT {TURN_COLUMNS} FROM turns WHERE tenant_id = $1 AND execution_id = $2 AND turn_number > $3 \
             ORDER BY turn_number LIMIT $4"
        );
        Ok(on_pool!(self, |pool| sqlx::query_as::<_, TurnRow>(sqlx::AssertSqlSafe(
            sql.clone()
        ))
        .bind(tenant_id)
        .bind(execution_id)
        .bind(after_number)
        .bind(limit)
        .fetch_all(pool)
        .await?)
        .into_iter()
        .map(Into::into)
        .collect())
    }

    /// A turn's state at `generation`, to tell whether a retried settlement had landed.
    pub(super) async fn turn_state(&self, id: &str, generation: Generation) -> StoreResult<Option<String>> {
        let row: Option<(String,)> = on_pool!(self, |pool| sqlx::query_as(
            "SELECT state FROM turns WHERE id = $1 AND generation = $2"
        )
        .bind(id)
        .bind(generation.get())
        .fetch_optional(pool)
        .await?);
        Ok(row.map(|(state,)| state))
    }
}
