//! Execution rows: insert, the compare-and-set update, the generation fence, reads,
//! and the sessions recorded on them.

use super::connection::{SqlStore, inserted_unless_fenced, on_pool};
use super::fence::LOCK_NOT_AVAILABLE;
use super::rows::ExecutionRow;
use crate::contract::*;
use crate::records::*;
use crate::replica::LEGACY_INCARNATION;
use cursor_runner_domain::state::ExecutionState;

const EXECUTION_COLUMNS: &str = "id, tenant_id, state, generation, workspace, session_id, active_turn_id, turn_count, pid, exit_code, exit_signal, failure_reason, failure_message, acked_sequence, created_at_ms, updated_at_ms, approval_policy, interaction_wait_limit_ms, lease, session_config, credential_name, turn_deadline_ms, max_turns, max_active_ms, active_ms";

/// The execution compare-and-set (on its generation and `$expected_state`, behind the
/// owner fence) run on `$executor`, a pool or an open transaction, as `$me`; evaluates to
/// the rows affected.
macro_rules! update_execution_on {
    ($executor:expr, $sql:expr, $expected_state:expr, $e:expr, $me:expr) => {{
        let e: &$crate::records::ExecutionRecord = $e;
        sqlx::query(sqlx::AssertSqlSafe($sql.update_execution.as_str()))
            .bind(e.state.as_str())
            .bind(&e.session_id)
            .bind(e.active_turn_id.as_deref())
            .bind(e.turn_count)
            .bind(e.pid)
            .bind(e.exit_code)
            .bind(e.exit_signal)
            .bind(&e.failure_reason)
            .bind(&e.failure_message)
            .bind(e.updated_at_ms)
            .bind($crate::sql::rows::lease_text(&e.lease))
            .bind($crate::sql::rows::config_text(&e.session_config))
            .bind(&e.credential_name)
            .bind(e.active_ms)
            .bind(e.id.as_str())
            .bind(e.generation.get())
            .bind($expected_state.as_str())
            .bind($me)
            .execute($executor)
            .await?
            .rows_affected()
    }};
}
pub(super) use update_execution_on;

impl SqlStore {
    pub(super) async fn insert_execution(&self, e: &ExecutionRecord) -> StoreResult<()> {
        let (sql, me) = (&self.shared.statements, self.shared.identity.fence_owner());
        let (outcome, retried) = on_pool!(@owner_write self, |pool| {
            sqlx::query(sqlx::AssertSqlSafe(sql.insert_execution.as_str()))
        .bind(e.id.as_str())
        .bind(&e.tenant_id)
        .bind(e.state.as_str())
        .bind(e.generation.get())
        .bind(&e.workspace)
        .bind(&e.session_id)
        .bind(e.active_turn_id.as_deref())
        .bind(e.turn_count)
        .bind(e.pid)
        .bind(e.exit_code)
        .bind(e.exit_signal)
        .bind(&e.failure_reason)
        .bind(&e.failure_message)
        .bind(e.acked_sequence)
        .bind(e.created_at_ms)
        .bind(e.updated_at_ms)
        .bind(e.approval_policy.as_str())
        .bind(e.interaction_wait_limit_ms)
        .bind(super::rows::lease_text(&e.lease))
        .bind(super::rows::config_text(&e.session_config))
        .bind(&e.credential_name)
        .bind(super::rows::ms_of(e.limits.turn_deadline))
        .bind(e.limits.max_turns.map(i64::from))
        .bind(super::rows::ms_of(e.limits.max_active))
        .bind(e.active_ms)
        // The replica that inserts an execution owns it.
        .bind(self.shared.identity.me())
        .bind(me)
        .execute(pool)
        .await?
        .rows_affected()
        });
        inserted_unless_fenced(outcome, retried)
    }

    pub(super) async fn update_execution(
        &self,
        expected_state: ExecutionState,
        e: &ExecutionRecord,
    ) -> StoreResult<bool> {
        let (sql, me) = (&self.shared.statements, self.shared.identity.fence_owner());
        let (outcome, retried) =
            on_pool!(@owner_write self, |pool| update_execution_on!(pool, sql, expected_state, e, me));
        match outcome? {
            1 => Ok(true),
            // The attempt that failed may have committed: then the row is already `e`.
            _ if retried => Ok(self.execution_state(&e.id, e.generation).await?
                == Some((e.state.as_str().to_owned(), e.updated_at_ms))),
            _ => Ok(false),
        }
    }

    pub(super) async fn get_execution(&self, tenant_id: &str, id: &str) -> StoreResult<Option<ExecutionRecord>> {
        let sql = format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE tenant_id = $1 AND id = $2");
        Ok(
            on_pool!(self, |pool| sqlx::query_as::<_, ExecutionRow>(sqlx::AssertSqlSafe(
                sql.clone()
            ))
            .bind(tenant_id)
            .bind(id)
            .fetch_optional(pool)
            .await?)
            .map(Into::into),
        )
    }

    pub(super) async fn list_executions(
        &self,
        tenant_id: &str,
        after_id: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<ExecutionRecord>> {
        let sql =
            format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE tenant_id = $1 AND id > $2 ORDER BY id LIMIT $3");
        Ok(
            on_pool!(self, |pool| sqlx::query_as::<_, ExecutionRow>(sqlx::AssertSqlSafe(
                sql.clone()
            ))
            .bind(tenant_id)
            .bind(after_id.unwrap_or(""))
            .bind(limit)
            .fetch_all(pool)
            .await?)
            .into_iter()
            .map(Into::into)
            .collect(),
        )
    }

    pub(super) async fn list_live_executions_of(&self, owner_incarnation: &str) -> StoreResult<Vec<ExecutionRecord>> {
        let sql = format!(
            "SELECT {EXECUTION_COLUMNS} FROM executions \
             WHERE owner_incarnation = $1 AND state IN ('starting', 'ready', 'closing') ORDER BY id"
        );
        Ok(
            on_pool!(self, |pool| sqlx::query_as::<_, ExecutionRow>(sqlx::AssertSqlSafe(
                sql.clone()
            ))
            .bind(owner_incarnation)
            .fetch_all(pool)
            .await?)
            .into_iter()
            .map(Into::into)
            .collect(),
        )
    }

    pub(super) async fn abandoned_incarnations(&self) -> StoreResult<Vec<String>> {
        let Some(me) = self.shared.identity.registered.get().map(|r| r.incarnation.clone()) else {
            return Ok(Vec::new());
        };
        let dialect = self.shared.statements.dialect;
        let sql = format!(
            "SELECT d.incarnation FROM replicas d \
             WHERE d.incarnation <> $1 AND d.incarnation <> $2 AND NOT {dead_live} \
             AND NOT EXISTS (SELECT 1 FROM replicas s WHERE s.name = d.name AND s.lease_until_ms > {now}) \
             AND (EXISTS (SELECT 1 FROM executions e WHERE e.owner_incarnation = d.incarnation \
                          AND e.state IN ('starting', 'ready', 'closing')) \
                  OR EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.claimed_by = d.incarnation \
                             AND k.state = 'in_flight')) \
             ORDER BY d.incarnation",
            dead_live = dialect.live_lease("d.incarnation"),
            now = dialect.now_ms
        );
        let found: Vec<(String,)> = on_pool!(self, |pool| sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
            .bind(&me)
            .bind(LEGACY_INCARNATION)
            .fetch_all(pool)
            .await?);
        Ok(found.into_iter().map(|(incarnation,)| incarnation).collect())
    }

    pub(super) async fn find_session(&self, tenant_id: &str, session_id: &str) -> StoreResult<Option<ExecutionRecord>> {
        let sql = format!(
            "SELECT {EXECUTION_COLUMNS} FROM executions WHERE tenant_id = $1 AND session_id = $2 \
             ORDER BY CASE WHEN state IN ('closed', 'failed', 'lost') THEN 1 ELSE 0 END, id DESC LIMIT 1"
        );
        Ok(
            on_pool!(self, |pool| sqlx::query_as::<_, ExecutionRow>(sqlx::AssertSqlSafe(
                sql.clone()
            ))
            .bind(tenant_id)
            .bind(session_id)
            .fetch_optional(pool)
            .await?)
            .map(Into::into),
        )
    }

    pub(super) async fn executions_leasing(&self, text: &str, limit: i64) -> StoreResult<Vec<ExecutionRecord>> {
        let sql =
            format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE lease LIKE $1 ESCAPE '\\' ORDER BY id LIMIT $2");
        let escaped: String = text
            .chars()
            .flat_map(|c| match c {
                '%' | '_' | '\\' => vec!['\\', c],
                c => vec![c],
            })
            .collect();
        let pattern = format!("%{escaped}%");
        Ok(
            on_pool!(self, |pool| sqlx::query_as::<_, ExecutionRow>(sqlx::AssertSqlSafe(
                sql.clone()
            ))
            .bind(&pattern)
            .bind(limit)
            .fetch_all(pool)
            .await?)
            .into_iter()
            .map(Into::into)
            .collect(),
        )
    }

    pub(super) async fn list_sessions(
        &self,
        tenant_id: &str,
        after_session_id: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<ExecutionRecord>> {
        let sql = format!(
            "SELECT {EXECUTION_COLUMNS} FROM executions WHERE id IN \
             (SELECT MAX(id) FROM executions WHERE tenant_id = $1 AND session_id IS NOT NULL AND session_id > $2 GROUP BY session_id) \
             ORDER BY session_id LIMIT $3"
        );
        Ok(
            on_pool!(self, |pool| sqlx::query_as::<_, ExecutionRow>(sqlx::AssertSqlSafe(
                sql.clone()
            ))
            .bind(tenant_id)
            .bind(after_session_id.unwrap_or(""))
            .bind(limit)
            .fetch_all(pool)
            .await?)
            .into_iter()
            .map(Into::into)
            .collect(),
        )
    }

    pub(super) async fn advance_generation(
        &self,
        tenant_id: &str,
        execution_id: &str,
        expected: Generation,
    ) -> StoreResult<bool> {
        let (sql, me) = (&self.shared.statements, self.shared.identity.fence_owner());
        let (outcome, retried) = on_pool!(@owner_write self, |pool| {
            sqlx::query(sqlx::AssertSqlSafe(sql.advance_generation.as_str()))
            .bind(tenant_id)
            .bind(execution_id)
            .bind(expected.get())
            // The new lease's process is this replica's.
            .bind(self.shared.identity.me())
            .bind(me)
            .execute(pool)
            .await?
            .rows_affected()
        });
        match outcome? {
            1 => Ok(true),
            // The attempt that failed may have committed: then the next generation is ours.
            _ if retried => {
                Ok(self.owner_at(execution_id, expected.next()).await?.as_deref() == Some(self.shared.identity.me()))
            }
            _ => Ok(false),
        }
    }

    pub(super) async fn claim_execution(
        &self,
        execution_id: &str,
        generation: Generation,
        from: &str,
    ) -> StoreResult<bool> {
        let sql = &self.shared.statements;
        let (outcome, retried) = on_pool!(@owner_write self, |pool| {
            let mut tx = pool.begin().await?;
            if let Some(bounded) = &sql.claim_lock_wait {
                sqlx::query(sqlx::AssertSqlSafe(bounded.as_str())).execute(&mut *tx).await?;
            }
            let claimed = sqlx::query(sqlx::AssertSqlSafe(sql.claim_execution.as_str()))
                .bind(execution_id)
                .bind(generation.get())
                .bind(self.shared.identity.me())
                .bind(from)
                .execute(&mut *tx)
                .await;
            match claimed {
                Ok(done) => {
                    tx.commit().await?;
                    done.rows_affected()
                }
                // Held up past `CLAIM_LOCK_WAIT`: busy, left for the next scan.
                Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(LOCK_NOT_AVAILABLE) => 0,
                Err(e) => return Err(e.into()),
            }
        });
        match outcome? {
            1 => Ok(true),
            // The attempt that failed may have committed: then the row is already ours.
            _ if retried => {
                Ok(self.owner_at(execution_id, generation).await?.as_deref() == Some(self.shared.identity.me()))
            }
            _ => Ok(false),
        }
    }

    /// The owner of an execution at `generation`, to tell whether a retried claim had landed.
    async fn owner_at(&self, id: &str, generation: Generation) -> StoreResult<Option<String>> {
        let row: Option<(String,)> = on_pool!(self, |pool| sqlx::query_as(
            "SELECT owner_incarnation FROM executions WHERE id = $1 AND generation = $2"
        )
        .bind(id)
        .bind(generation.get())
        .fetch_optional(pool)
        .await?);
        Ok(row.map(|(owner,)| owner))
    }

    /// An execution's state and update time at `generation`, to tell whether a retried
    /// update had landed.
    pub(super) async fn execution_state(&self, id: &str, generation: Generation) -> StoreResult<Option<(String, i64)>> {
        Ok(on_pool!(self, |pool| sqlx::query_as(
            "SELECT state, updated_at_ms FROM executions WHERE id = $1 AND generation = $2"
        )
        .bind(id)
        .bind(generation.get())
        .fetch_optional(pool)
        .await?))
    }
}
