//! Interaction rows: insert, the fenced compare-and-set transition, reads.

use super::connection::{SqlStore, inserted_unless_fenced, on_pool};
use super::rows::InteractionRow;
use crate::contract::*;
use crate::records::*;
use cursor_runner_domain::state::InteractionState;

/// The interaction compare-and-set's parameters (`Statements::transition_interaction`),
/// bound onto `$query` in their order: the transition of `$i` from `$expected_state`, as `$me`.
macro_rules! bind_transition_interaction {
    ($query:expr, $expected_state:expr, $i:expr, $me:expr) => {{
        let i: &$crate::records::InteractionRecord = $i;
        $query
            .bind(i.state.as_str())
            .bind(i.outcome.as_ref().map($crate::sql::rows::json_text))
            .bind(&i.answer_request_id)
            .bind(&i.answer_fingerprint)
            .bind(i.reason.map(|r| r.as_str()))
            .bind(i.delivery.map(|d| d.as_str()))
            .bind(i.replay_allowed)
            .bind(i.updated_at_ms)
            .bind(i.id.as_str())
            .bind(i.generation.get())
            .bind($expected_state.as_str())
            .bind($me)
    }};
}
pub(super) use bind_transition_interaction;

/// The interaction compare-and-set (on its state and generation, behind the owner fence)
/// run on `$executor`, a pool or an open transaction, as `$me`; evaluates to the rows
/// affected.
macro_rules! transition_interaction_on {
    ($executor:expr, $sql:expr, $expected_state:expr, $i:expr, $me:expr) => {{
        let query = sqlx::query(sqlx::AssertSqlSafe($sql.transition_interaction.as_str()));
        $crate::sql::interactions::bind_transition_interaction!(query, $expected_state, $i, $me)
            .execute($executor)
            .await?
            .rows_affected()
    }};
}
pub(super) use transition_interaction_on;

/// The interaction insert, behind the owner fence, run on `$executor` (a pool or an open
/// transaction) as `$me`; evaluates to the rows affected (0: fenced).
macro_rules! insert_interaction_on {
    ($executor:expr, $sql:expr, $i:expr, $me:expr) => {{
        let i: &$crate::records::InteractionRecord = $i;
        sqlx::query(sqlx::AssertSqlSafe($sql.insert_interaction.as_str()))
            .bind(i.id.as_str())
            .bind(i.execution_id.as_str())
            .bind(&i.tenant_id)
            .bind(i.generation.get())
            .bind(i.turn_id.as_str())
            .bind(&i.native_request_id)
            .bind(i.kind.as_str())
            .bind(i.state.as_str())
            .bind(&i.etag)
            .bind($crate::sql::rows::json_text(&i.request))
            .bind(i.outcome.as_ref().map($crate::sql::rows::json_text))
            .bind(&i.answer_request_id)
            .bind(&i.answer_fingerprint)
            .bind(i.reason.map(|r| r.as_str()))
            .bind(i.delivery.map(|d| d.as_str()))
            .bind(i.replay_allowed)
            .bind(i.created_at_ms)
            .bind(i.updated_at_ms)
            .bind($me)
            .execute($executor)
            .await?
            .rows_affected()
    }};
}
pub(super) use insert_interaction_on;

impl SqlStore {
    pub(super) async fn insert_interaction(&self, i: &InteractionRecord) -> StoreResult<()> {
        let (sql, me) = (&self.shared.statements, self.shared.identity.fence_owner());
        let (outcome, retried) = on_pool!(@owner_write self, |pool| insert_interaction_on!(pool, sql, i, me));
        inserted_unless_fenced(outcome, retried)
    }

    pub(super) async fn transition_interaction(
        &self,
        expected_state: InteractionState,
        i: &InteractionRecord,
    ) -> StoreResult<bool> {
        let (sql, me) = (&self.shared.statements, self.shared.identity.fence_owner());
        let (outcome, retried) =
            on_pool!(@owner_write self, |pool| transition_interaction_on!(pool, sql, expected_state, i, me));
        match outcome? {
            1 => Ok(true),
            // The attempt that failed may have committed: then the row is already `next`.
            _ if retried => Ok(self.interaction_state(&i.id, i.generation).await?
                == Some((i.state.as_str().to_owned(), i.updated_at_ms))),
            _ => Ok(false),
        }
    }

    pub(super) async fn get_interaction(&self, tenant_id: &str, id: &str) -> StoreResult<Option<InteractionRecord>> {
        let row: Option<InteractionRow> = on_pool!(self, |pool| sqlx::query_as(
            "SELECT * FROM interactions WHERE tenant_id = $1 AND id = $2"
        )
        .bind(tenant_id)
        .bind(id)
        .fetch_optional(pool)
        .await?);
        Ok(row.map(InteractionRecord::from))
    }

    pub(super) async fn list_interactions(&self, q: &InteractionQuery) -> StoreResult<Vec<InteractionRecord>> {
        let rows: Vec<InteractionRow> = on_pool!(self, |pool| sqlx::query_as(
            "SELECT * FROM interactions WHERE tenant_id = $1 AND ($2 = '' OR execution_id = $2) \
             AND ($3 = '' OR state = $3) AND id > $4 ORDER BY id LIMIT $5"
        )
        .bind(&q.tenant_id)
        .bind(q.execution_id.as_deref().unwrap_or(""))
        .bind(q.state.map_or("", |state| state.as_str()))
        .bind(q.after_id.as_deref().unwrap_or(""))
        .bind(q.limit)
        .fetch_all(pool)
        .await?);
        Ok(rows.into_iter().map(InteractionRecord::from).collect())
    }

    /// An interaction's state and update time at `generation`, to tell whether a retried
    /// transition had landed (the time tells this transition from an earlier one).
    pub(super) async fn interaction_state(
        &self,
        id: &str,
        generation: Generation,
    ) -> StoreResult<Option<(String, i64)>> {
        Ok(on_pool!(self, |pool| sqlx::query_as(
            "SELECT state, updated_at_ms FROM interactions WHERE id = $1 AND generation = $2"
        )
        .bind(id)
        .bind(generation.get())
        .fetch_optional(pool)
        .await?))
    }
}
