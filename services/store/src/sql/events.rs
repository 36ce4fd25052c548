//! The event outbox: fenced appends (on PostgreSQL, several executions' in one statement
//! when they wait together: `sql::append_group`), paged reads, head and oldest, retention's prune,
//! and the control plane's cumulative acknowledgement.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

use super::append_group::{Grouped, Waiting};
use super::connection::{Pool, SqlStore, on_pool};
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

/// The columns of the events `$rows()` yields bound onto `$query`, one array each, in the
/// order of `INSERT INTO events (execution_id, sequence, event_id, generation, turn_id,
/// item_id, event_type, priority, schema_version, emitted_at_ms, payload)`: the rows of an
/// `UNNEST` (PostgreSQL).
macro_rules! bind_event_columns {
    ($query:expr, $rows:expr) => {{
        let rows = $rows;
        $query
            .bind(rows().map(|e| e.execution_id.as_str()).collect::<Vec<_>>())
            .bind(rows().map(|e| e.sequence).collect::<Vec<_>>())
            .bind(rows().map(|e| e.event_id.as_str()).collect::<Vec<_>>())
            .bind(rows().map(|e| e.generation.get()).collect::<Vec<_>>())
            .bind(rows().map(|e| e.turn_id.as_deref()).collect::<Vec<_>>())
            .bind(rows().map(|e| e.item_id.as_deref()).collect::<Vec<_>>())
            .bind(rows().map(|e| e.event_type.as_str()).collect::<Vec<_>>())
            .bind(rows().map(|e| e.priority).collect::<Vec<_>>())
            .bind(rows().map(|e| e.schema_version).collect::<Vec<_>>())
            .bind(rows().map(|e| e.emitted_at_ms).collect::<Vec<_>>())
            .bind(rows().map(|e| e.payload.as_str()).collect::<Vec<_>>())
    }};
}
pub(super) use bind_event_columns;

impl SqlStore {
    /// With other executions' appends in one group statement where there is one
    /// (`sql::append_group`), else (or after the group failed) alone.
    pub(super) async fn append(&self, events: Arc<[EventRecord]>) -> StoreResult<()> {
        if one_execution_and_generation(&events)?.is_none() {
            return Ok(());
        }
        self.shared.fence.owner_write_allowed()?;
        let tried = match self.append_in_group(events.clone()).await {
            None => false,
            Some(Grouped::Landed) => return Ok(()),
            Some(Grouped::Fenced) => return Err(StoreError::Fenced),
            Some(Grouped::Failed { maybe_committed }) => maybe_committed,
        };
        self.append_events(&events, tried).await
    }

    /// One statement for one execution's append; `tried`: an attempt that may have
    /// committed was made already. (Observed as `append_events`, as a group is.)
    async fn append_events(&self, events: &[EventRecord], tried: bool) -> StoreResult<()> {
        let Some((execution_id, generation)) = one_execution_and_generation(events)? else {
            return Ok(());
        };
        let (sql, me) = (&self.shared.statements, self.shared.identity.fence_owner());
        let (outcome, retried) =
            on_pool!(@owner_write self, |pool| append_events_on!(pool, sql, events, execution_id, generation, me));
        match outcome {
            // The attempt that failed committed: the rows are ours (one writer per
            // execution assigns these sequences).
            Err(StoreError::Duplicate) if retried || tried => Ok(()),
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

/// A group taken to commit, holding its slot: when it is done (or dropped), the slot is
/// free again and whatever waited meanwhile goes in the next groups.
struct Group {
    members: Vec<Waiting>,
    slot: Option<OwnedSemaphorePermit>,
    store: SqlStore,
}

impl Drop for Group {
    fn drop(&mut self) {
        drop(self.slot.take());
        self.store.start_waiting_groups();
    }
}

impl SqlStore {
    /// Appends `events` (one execution's, of one generation, not empty) with whatever
    /// other executions' appends go in the same group; `None` on SQLite, where appends go
    /// alone (one writer at a time: nothing to group). While a slot is free the append
    /// commits its group itself, at once (alone, when nothing else waits); otherwise it
    /// waits for the group that a slot's release starts.
    async fn append_in_group(&self, events: Arc<[EventRecord]>) -> Option<Grouped> {
        let outcome = self.shared.appends.as_ref()?.wait(events);
        if let Some(group) = self.next_group() {
            group.commit().await;
        }
        // A member is told once its group is done; a group dropped unfinished (its
        // caller went away mid-statement) may have committed.
        Some(outcome.await.unwrap_or(Grouped::Failed { maybe_committed: true }))
    }

    /// The next group of what waits, if a slot is free.
    fn next_group(&self) -> Option<Group> {
        let (members, slot) = self.shared.appends.as_ref()?.next()?;
        Some(Group {
            members,
            slot: Some(slot),
            store: SqlStore {
                shared: self.shared.clone(),
                patience: Patience::None,
            },
        })
    }

    /// Commits what waits, in as many groups as there are free slots, each on its own
    /// task. Every release of a slot comes here, so nothing waits while a slot is free.
    fn start_waiting_groups(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        while let Some(group) = self.next_group() {
            runtime.spawn(group.commit());
        }
    }
}

impl Group {
    /// One statement for the group; each member is told how its append ended.
    async fn commit(mut self) {
        let members = std::mem::take(&mut self.members);
        self.store.commit_group(members).await;
    }
}

impl SqlStore {
    /// One statement for `group`; each member is told how its append ended.
    async fn commit_group(&self, group: Vec<Waiting>) {
        let started = std::time::Instant::now();
        let outcome = self.insert_group(&group).await;
        self.observe("append_events", started.elapsed(), outcome.is_ok());
        match outcome {
            Ok(landed) => {
                for member in group {
                    let execution = member.events[0].execution_id.as_str();
                    let rows = landed.get(execution).copied().unwrap_or(0);
                    let told = if rows == 0 { Grouped::Fenced } else { Grouped::Landed };
                    let _ = member.told.send(told);
                }
            }
            Err(e) => {
                let maybe_committed = e.is_transient();
                for member in group {
                    let _ = member.told.send(Grouped::Failed { maybe_committed });
                }
            }
        }
    }

    /// Inserts every member's rows behind its own fence; the rows that went in, by
    /// execution. A group of one takes the single append's plainer statement, which
    /// PostgreSQL plans and runs faster: grouping costs a lone append nothing.
    async fn insert_group(&self, group: &[Waiting]) -> StoreResult<HashMap<String, i64>> {
        let (Pool::Postgres(pool), Some(groups)) = (&self.shared.pool, &self.shared.appends) else {
            return Err(StoreError::Database("appends are grouped on PostgreSQL only".into()));
        };
        if let [alone] = group {
            let events = &alone.events;
            let (sql, me) = (&self.shared.statements, self.shared.identity.fence_owner());
            let (execution_id, generation) = (events[0].execution_id.as_str(), events[0].generation);
            let rows = append_events_on!(pool, sql, events.iter(), execution_id, generation, me);
            return Ok(HashMap::from([(execution_id.to_owned(), rows as i64)]));
        }
        let rows = || group.iter().flat_map(|member| member.events.iter());
        let query = sqlx::query_as(sqlx::AssertSqlSafe(groups.statement())).bind(self.shared.identity.fence_owner());
        let landed: Vec<(String, i64)> = bind_event_columns!(query, rows)
            .bind(
                group
                    .iter()
                    .map(|m| m.events[0].execution_id.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(group.iter().map(|m| m.events[0].generation.get()).collect::<Vec<_>>())
            .fetch_all(pool)
            .await?;
        Ok(landed.into_iter().collect())
    }
}
