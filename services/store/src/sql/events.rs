//! The event outbox: fenced appends, paged reads, head and oldest, retention's prune,
//! and the control plane's cumulative acknowledgement.

use super::connection::{SqlStore, on_pool};
use crate::contract::*;
use crate::records::*;

/// The fenced append run on `$executor`, a pool or an open transaction, as `$me`: one
/// statement, the rows go in only behind the owner fence (`OWNED`), so a superseded writer
/// can never append (no extra round trip). Evaluates to the rows affected (0: fenced).
macro_rules! append_events_on {
    ($executor:expr, $sql:expr, $events:expr, $execution_id:expr, $generation:expr, $me:expr) => {{
        let mut builder = sqlx::QueryBuilder::new(
            "INSERT INTO events (execution_id, sequence, event_id, generation, turn_id, item_id, event_type, priority, schema_version, emitted_at_ms, payload) SELECT * FROM (",
        );
        builder.push_values($events, |mut row, e: &$crate::records::EventRecord| {
            row.push_bind(e.execution_id.as_str())
                .push_bind(e.sequence)
                .push_bind(&e.event_id)
                .push_bind(e.generation.get())
                .push_bind(e.turn_id.as_deref())
                .push_bind(&e.item_id)
                .push_bind(&e.event_type)
                .push_bind(e.priority)
                .push_bind(e.schema_version)
                .push_bind(e.emitted_at_ms)
                .push_bind(&e.payload);
        });
        builder.push(") AS appended WHERE ");
        $sql.push_owned(&mut builder, $execution_id, $generation, $me);
        builder.build().execute($executor).await?.rows_affected()
    }};
}
pub(super) use append_events_on;

impl SqlStore {
    pub(super) async fn append_events(&self, events: &[EventRecord]) -> StoreResult<()> {
        let Some((execution_id, generation)) = one_execution_and_generation(events)? else {
            return Ok(());
        };
        let (sql, me) = (&self.shared.statements, self.shared.identity.fence_owner());
        let (outcome, retried) =
            on_pool!(@owner_write self, |pool| append_events_on!(pool, sql, events, execution_id, generation, me));
        match outcome {
            // The attempt that failed committed: the rows are ours (one writer per
            // execution assigns these sequences).
            Err(StoreError::Duplicate) if retried => Ok(()),
            Ok(0) => Err(StoreError::Fenced),
            other => other.map(drop),
        }
    }

    pub(super) async fn read_events(
        &self,
        execution_id: &str,
        after_sequence: i64,
        limit: i64,
    ) -> StoreResult<Vec<EventRecord>> {
        let rows: Vec<super::rows::EventRow> = on_pool!(self, |pool| {
            sqlx::query_as("SELECT * FROM events WHERE execution_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3")
                .bind(execution_id)
                .bind(after_sequence)
                .bind(limit)
                .fetch_all(pool)
                .await?
        });
        Ok(rows.into_iter().map(Into::into).collect())
    }

    pub(super) async fn head_sequence(&self, execution_id: &str) -> StoreResult<i64> {
        let (head,): (Option<i64>,) = on_pool!(self, |pool| sqlx::query_as(
            "SELECT MAX(sequence) FROM events WHERE execution_id = $1"
        )
        .bind(execution_id)
        .fetch_one(pool)
        .await?);
        Ok(head.unwrap_or(0))
    }

    pub(super) async fn oldest_sequence(&self, execution_id: &str) -> StoreResult<Option<i64>> {
        let (oldest,): (Option<i64>,) = on_pool!(self, |pool| sqlx::query_as(
            "SELECT MIN(sequence) FROM events WHERE execution_id = $1"
        )
        .bind(execution_id)
        .fetch_one(pool)
        .await?);
        Ok(oldest)
    }

    pub(super) async fn prune_events(
        &self,
        execution_id: &str,
        through: i64,
        emitted_before_ms: i64,
        limit: i64,
    ) -> StoreResult<u64> {
        Ok(on_pool!(self, |pool| sqlx::query(
            "DELETE FROM events WHERE execution_id = $1 AND sequence IN \
             (SELECT sequence FROM events WHERE execution_id = $1 AND sequence <= $2 AND emitted_at_ms < $3 \
              ORDER BY sequence LIMIT $4)"
        )
        .bind(execution_id)
        .bind(through)
        .bind(emitted_before_ms)
        .bind(limit)
        .execute(pool)
        .await?
        .rows_affected()))
    }

    pub(super) async fn acknowledged_executions(
        &self,
        after_id: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<(ExecutionId, i64)>> {
        let rows: Vec<(String, i64)> = on_pool!(self, |pool| sqlx::query_as(
            "SELECT id, acked_sequence FROM executions WHERE acked_sequence > 0 AND id > $1 ORDER BY id LIMIT $2"
        )
        .bind(after_id.unwrap_or(""))
        .bind(limit)
        .fetch_all(pool)
        .await?);
        Ok(rows.into_iter().map(|(id, acked)| (id.into(), acked)).collect())
    }

    pub(super) async fn set_acked_sequence(
        &self,
        tenant_id: &str,
        execution_id: &str,
        through: i64,
    ) -> StoreResult<()> {
        on_pool!(self, |pool| {
            sqlx::query(
                "UPDATE executions SET acked_sequence = $1 WHERE tenant_id = $2 AND id = $3 AND acked_sequence <= $1",
            )
            .bind(through)
            .bind(tenant_id)
            .bind(execution_id)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(())
    }
}
