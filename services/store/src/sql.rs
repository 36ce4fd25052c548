//! The SQL implementation shared by both backends.

use async_trait::async_trait;
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{PgPool, QueryBuilder, SqlitePool};
use std::str::FromStr;
use std::sync::Arc;

use crate::contract::*;
use crate::records::*;

static PG_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/postgres");
static SQLITE_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite");

/// Connections a service opens to PostgreSQL.
const PG_MAX_CONNECTIONS: u32 = 8;

/// How long an operation waits for a connection before it fails `Unavailable`: while the
/// database is down, a caller gets a typed answer it can retry instead of its own deadline.
pub const PG_ACQUIRE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

enum Pool {
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

/// Runs `$body` on whichever pool this store has (the expression is compiled once per
/// backend), timing each attempt for the observer under the name of the method it is in (a
/// `Store` method: a small closed set), and retrying transient failures as the store's
/// [`Patience`] says. `on_pool!(@attempts …)` yields `(outcome, retried)` for the methods
/// that must tell "already there" after a retry from a real conflict.
macro_rules! on_pool {
    ($self:ident, |$pool:ident| $body:expr) => {{ on_pool!(@attempts $self, |$pool| $body).0? }};
    (@attempts $self:ident, |$pool:ident| $body:expr) => {{
        fn here() {}
        let operation = operation_name(std::any::type_name_of_val(&here));
        let mut attempts = crate::retry::Attempts::new($self.patience, std::time::Instant::now());
        loop {
            let started = std::time::Instant::now();
            let outcome: StoreResult<_> = async {
                Ok(match &$self.shared.pool {
                    Pool::Postgres($pool) => $body,
                    Pool::Sqlite($pool) => $body,
                })
            }
            .await;
            $self.observe(operation, started.elapsed(), outcome.is_ok());
            if let Err(e) = &outcome
                && e.is_transient()
                && let Some(pause) = attempts.after_transient_failure(std::time::Instant::now())
            {
                tracing::warn!(operation, error = %e, retry_in_ms = pause.as_millis() as u64, "store unavailable; retrying");
                tokio::time::sleep(pause).await;
                continue;
            }
            break (outcome, attempts.retried());
        }
    }};
}

/// `…::SqlStore>::insert_execution::{{closure}}::here` → `insert_execution`.
fn operation_name(path: &'static str) -> &'static str {
    path.rsplit("::")
        .find(|segment| *segment != "here" && !segment.starts_with('{'))
        .unwrap_or("unknown")
}

pub struct SqlStore {
    shared: Arc<Shared>,
    patience: Patience,
}

/// What every patience of one store shares.
struct Shared {
    pool: Pool,
    observer: std::sync::OnceLock<Arc<dyn StoreObserver>>,
    /// Where the sole-service claim is made: a dedicated PostgreSQL connection's options,
    /// or the SQLite file's lock file (`None`: in memory, nothing to share).
    claim_target: ClaimTarget,
    /// The held claim: the connection that holds the advisory lock, or the locked file.
    claim: tokio::sync::Mutex<Option<SoleServiceClaim>>,
}

enum ClaimTarget {
    Postgres(Box<PgConnectOptions>),
    SqliteFile(std::path::PathBuf),
    None,
}

/// Kept, never read: the claim lasts as long as the value does.
#[allow(dead_code)]
enum SoleServiceClaim {
    Postgres(PgConnection),
    SqliteFile(std::fs::File),
}

/// The advisory lock key of the sole-service claim (`cursor-r` in ASCII).
const SOLE_SERVICE_LOCK_KEY: i64 = 0x6375_7273_6f72_2d72;

impl SqlStore {
    fn observe(&self, operation: &'static str, took: std::time::Duration, ok: bool) {
        if let Some(observer) = self.shared.observer.get() {
            observer.observed(operation, took, ok);
        }
    }
}

impl SqlStore {
    /// `postgres://…` or `sqlite:PATH` / `sqlite::memory:`; migrations run on connect.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let claim_target;
        let pool = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let options = PgConnectOptions::from_str(url)?;
            claim_target = ClaimTarget::Postgres(Box::new(options.clone()));
            // The pool retries a refused or unauthenticated connection until its acquire
            // timeout and then reports only "pool timed out"; one direct connection first
            // fails at once with the server's real answer.
            PgConnection::connect_with(&options).await?.close().await?;
            Pool::Postgres(
                PgPoolOptions::new()
                    .max_connections(PG_MAX_CONNECTIONS)
                    .acquire_timeout(PG_ACQUIRE_TIMEOUT)
                    .connect_with(options)
                    .await?,
            )
        } else if url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                .busy_timeout(std::time::Duration::from_secs(10))
                .foreign_keys(true);
            // An in-memory database lives in one connection; a file may have several.
            let max = if url.contains(":memory:") { 1 } else { 4 };
            claim_target = if url.contains(":memory:") {
                ClaimTarget::None
            } else {
                let mut lock = options.get_filename().as_os_str().to_owned();
                lock.push(".service-lock");
                ClaimTarget::SqliteFile(lock.into())
            };
            Pool::Sqlite(
                SqlitePoolOptions::new()
                    .max_connections(max)
                    .connect_with(options)
                    .await?,
            )
        } else {
            return Err(StoreError::UnsupportedUrl(redact_url(url)));
        };
        let store = Self {
            shared: Arc::new(Shared {
                pool,
                observer: std::sync::OnceLock::new(),
                claim_target,
                claim: tokio::sync::Mutex::new(None),
            }),
            patience: Patience::None,
        };
        store.migrate().await?;
        Ok(store)
    }

    async fn migrate(&self) -> StoreResult<()> {
        let result = match &self.shared.pool {
            Pool::Postgres(pool) => PG_MIGRATOR.run(pool).await,
            Pool::Sqlite(pool) => SQLITE_MIGRATOR.run(pool).await,
        };
        result.map_err(|e| StoreError::Migration(e.to_string()))
    }
}

impl SqlStore {
    /// A turn's state at `generation`, to tell whether a retried settlement had landed.
    async fn turn_state(&self, id: &str, generation: i64) -> StoreResult<Option<String>> {
        let row: Option<(String,)> = on_pool!(self, |pool| sqlx::query_as(
            "SELECT state FROM turns WHERE id = $1 AND generation = $2"
        )
        .bind(id)
        .bind(generation)
        .fetch_optional(pool)
        .await?);
        Ok(row.map(|(state,)| state))
    }

    /// An execution's state and update time at `generation`, to tell whether a retried
    /// update had landed.
    async fn execution_state(&self, id: &str, generation: i64) -> StoreResult<Option<(String, i64)>> {
        Ok(on_pool!(self, |pool| sqlx::query_as(
            "SELECT state, updated_at_ms FROM executions WHERE id = $1 AND generation = $2"
        )
        .bind(id)
        .bind(generation)
        .fetch_optional(pool)
        .await?))
    }

    /// An interaction's state and update time at `generation`, to tell whether a retried
    /// transition had landed (the time tells this transition from an earlier one).
    async fn interaction_state(&self, id: &str, generation: i64) -> StoreResult<Option<(String, i64)>> {
        Ok(on_pool!(self, |pool| sqlx::query_as(
            "SELECT state, updated_at_ms FROM interactions WHERE id = $1 AND generation = $2"
        )
        .bind(id)
        .bind(generation)
        .fetch_optional(pool)
        .await?))
    }
}

/// An insert retried after a transient failure that finds its row already there: the
/// failed attempt committed (the ids are the writer's own), so it succeeded.
fn already_there_after_retry(outcome: StoreResult<u64>, retried: bool) -> StoreResult<()> {
    match outcome {
        Err(StoreError::Duplicate) if retried => Ok(()),
        other => other.map(drop),
    }
}

/// A URL with its password removed, for error messages.
fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://…@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

const EXECUTION_COLUMNS: &str = "id, tenant_id, state, generation, workspace, session_id, active_turn_id, turn_count, pid, exit_code, exit_signal, failure_reason, failure_message, acked_sequence, created_at_ms, updated_at_ms, approval_policy, interaction_wait_limit_ms, lease, session_config, credential_name, turn_deadline_ms, max_turns, max_active_ms, active_ms";
const TURN_COLUMNS: &str = "id, execution_id, tenant_id, generation, turn_number, state, stop_reason, failure_reason, failure_message, started_at_ms, ended_at_ms, credential_name, session_config, usage";

#[async_trait]
impl Store for SqlStore {
    fn observe_with(&self, observer: Arc<dyn StoreObserver>) {
        let _ = self.shared.observer.set(observer);
    }

    fn with_patience(&self, patience: Patience) -> Arc<dyn Store> {
        Arc::new(Self {
            shared: self.shared.clone(),
            patience,
        })
    }

    fn backend(&self) -> &'static str {
        match self.shared.pool {
            Pool::Postgres(_) => "postgres",
            Pool::Sqlite(_) => "sqlite",
        }
    }

    async fn claim_sole_service(&self) -> StoreResult<()> {
        let mut held = self.shared.claim.lock().await;
        if held.is_some() {
            return Ok(());
        }
        *held = match &self.shared.claim_target {
            ClaimTarget::None => return Ok(()),
            ClaimTarget::Postgres(options) => {
                let mut connection = PgConnection::connect_with(options).await?;
                let (locked,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_lock($1)")
                    .bind(SOLE_SERVICE_LOCK_KEY)
                    .fetch_one(&mut connection)
                    .await?;
                if !locked {
                    connection.close().await?;
                    return Err(StoreError::AnotherService);
                }
                Some(SoleServiceClaim::Postgres(connection))
            }
            ClaimTarget::SqliteFile(path) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(path)
                    .map_err(|e| StoreError::Database(format!("{}: {e}", path.display())))?;
                match file.try_lock() {
                    Ok(()) => Some(SoleServiceClaim::SqliteFile(file)),
                    Err(std::fs::TryLockError::WouldBlock) => return Err(StoreError::AnotherService),
                    Err(std::fs::TryLockError::Error(e)) => {
                        return Err(StoreError::Database(format!("{}: {e}", path.display())));
                    }
                }
            }
        };
        Ok(())
    }

    async fn claim_idempotency(&self, key: &IdempotencyKey, request_digest: &str) -> StoreResult<IdempotencyClaim> {
        let inserted = on_pool!(self, |pool| {
            sqlx::query(
                "INSERT INTO idempotency_keys (tenant_id, operation, request_id, request_digest, state, created_at_ms) \
             VALUES ($1, $2, $3, $4, 'in_flight', $5) ON CONFLICT DO NOTHING",
            )
            .bind(&key.tenant_id)
            .bind(&key.operation)
            .bind(&key.request_id)
            .bind(request_digest)
            .bind(now_ms())
            .execute(pool)
            .await?
            .rows_affected()
        });
        if inserted == 1 {
            return Ok(IdempotencyClaim::Claimed);
        }
        let row: Option<(String, String, Option<String>)> = on_pool!(self, |pool| sqlx::query_as(
            "SELECT request_digest, state, response FROM idempotency_keys \
             WHERE tenant_id = $1 AND operation = $2 AND request_id = $3"
        )
        .bind(&key.tenant_id)
        .bind(&key.operation)
        .bind(&key.request_id)
        .fetch_optional(pool)
        .await?);
        Ok(match row {
            // Released between our insert and our read: the caller may simply retry.
            None => IdempotencyClaim::InFlight,
            Some((digest, _, _)) if digest != request_digest => IdempotencyClaim::DigestMismatch,
            Some((_, state, Some(response))) if state == "done" => {
                IdempotencyClaim::Completed(serde_json::from_str(&response).unwrap_or(serde_json::Value::Null))
            }
            Some(_) => IdempotencyClaim::InFlight,
        })
    }

    async fn complete_idempotency(&self, key: &IdempotencyKey, response: &serde_json::Value) -> StoreResult<()> {
        on_pool!(self, |pool| sqlx::query(
            "UPDATE idempotency_keys SET state = 'done', response = $4 \
             WHERE tenant_id = $1 AND operation = $2 AND request_id = $3"
        )
        .bind(&key.tenant_id)
        .bind(&key.operation)
        .bind(&key.request_id)
        .bind(response.to_string())
        .execute(pool)
        .await?
        .rows_affected());
        Ok(())
    }

    async fn release_idempotency(&self, key: &IdempotencyKey) -> StoreResult<()> {
        on_pool!(self, |pool| {
            sqlx::query(
            "DELETE FROM idempotency_keys WHERE tenant_id = $1 AND operation = $2 AND request_id = $3 AND state = 'in_flight'"
        )
        .bind(&key.tenant_id)
        .bind(&key.operation)
        .bind(&key.request_id)
        .execute(pool)
        .await?
        .rows_affected()
        });
        Ok(())
    }

    async fn complete_abandoned_idempotency(&self, response: &serde_json::Value) -> StoreResult<u64> {
        Ok(on_pool!(self, |pool| sqlx::query(
            "UPDATE idempotency_keys SET state = 'done', response = $1 WHERE state = 'in_flight'"
        )
        .bind(response.to_string())
        .execute(pool)
        .await?
        .rows_affected()))
    }

    async fn prune_idempotency(&self, created_before_ms: i64, limit: i64) -> StoreResult<u64> {
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

    async fn insert_execution(&self, e: &ExecutionRecord) -> StoreResult<()> {
        let (outcome, retried) = on_pool!(@attempts self, |pool| {
            sqlx::query(
            "INSERT INTO executions (id, tenant_id, state, generation, workspace, session_id, active_turn_id, turn_count, pid, exit_code, exit_signal, failure_reason, failure_message, acked_sequence, created_at_ms, updated_at_ms, approval_policy, interaction_wait_limit_ms, lease, session_config, credential_name, turn_deadline_ms, max_turns, max_active_ms, active_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25)"
        )
        .bind(&e.id)
        .bind(&e.tenant_id)
        .bind(&e.state)
        .bind(e.generation)
        .bind(&e.workspace)
        .bind(&e.session_id)
        .bind(&e.active_turn_id)
        .bind(e.turn_count)
        .bind(e.pid)
        .bind(e.exit_code)
        .bind(e.exit_signal)
        .bind(&e.failure_reason)
        .bind(&e.failure_message)
        .bind(e.acked_sequence)
        .bind(e.created_at_ms)
        .bind(e.updated_at_ms)
        .bind(&e.approval_policy)
        .bind(e.interaction_wait_limit_ms)
        .bind(&e.lease)
        .bind(&e.session_config)
        .bind(&e.credential_name)
        .bind(e.turn_deadline_ms)
        .bind(e.max_turns)
        .bind(e.max_active_ms)
        .bind(e.active_ms)
        .execute(pool)
        .await?
        .rows_affected()
        });
        already_there_after_retry(outcome, retried)
    }

    async fn update_execution(&self, expected_state: &str, e: &ExecutionRecord) -> StoreResult<bool> {
        let (outcome, retried) = on_pool!(@attempts self, |pool| {
            sqlx::query(
                "UPDATE executions SET state = $1, session_id = $2, active_turn_id = $3, turn_count = $4, pid = $5, \
             exit_code = $6, exit_signal = $7, failure_reason = $8, failure_message = $9, updated_at_ms = $10, lease = $11, session_config = $12, \
             credential_name = $13, active_ms = $14 \
             WHERE id = $15 AND generation = $16 AND state = $17",
            )
            .bind(&e.state)
            .bind(&e.session_id)
            .bind(&e.active_turn_id)
            .bind(e.turn_count)
            .bind(e.pid)
            .bind(e.exit_code)
            .bind(e.exit_signal)
            .bind(&e.failure_reason)
            .bind(&e.failure_message)
            .bind(e.updated_at_ms)
            .bind(&e.lease)
            .bind(&e.session_config)
            .bind(&e.credential_name)
            .bind(e.active_ms)
            .bind(&e.id)
            .bind(e.generation)
            .bind(expected_state)
            .execute(pool)
            .await?
            .rows_affected()
        });
        match outcome? {
            1 => Ok(true),
            // The attempt that failed may have committed: then the row is already `e`.
            _ if retried => {
                Ok(self.execution_state(&e.id, e.generation).await? == Some((e.state.clone(), e.updated_at_ms)))
            }
            _ => Ok(false),
        }
    }

    async fn get_execution(&self, tenant_id: &str, id: &str) -> StoreResult<Option<ExecutionRecord>> {
        let sql = format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE tenant_id = $1 AND id = $2");
        Ok(on_pool!(self, |pool| sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
            .bind(tenant_id)
            .bind(id)
            .fetch_optional(pool)
            .await?))
    }

    async fn list_executions(
        &self,
        tenant_id: &str,
        after_id: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<ExecutionRecord>> {
        let sql =
            format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE tenant_id = $1 AND id > $2 ORDER BY id LIMIT $3");
        Ok(on_pool!(self, |pool| sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
            .bind(tenant_id)
            .bind(after_id.unwrap_or(""))
            .bind(limit)
            .fetch_all(pool)
            .await?))
    }

    async fn list_live_executions(&self) -> StoreResult<Vec<ExecutionRecord>> {
        let sql = format!(
            "SELECT {EXECUTION_COLUMNS} FROM executions WHERE state IN ('starting', 'ready', 'closing') ORDER BY id"
        );
        Ok(on_pool!(self, |pool| sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
            .fetch_all(pool)
            .await?))
    }

    async fn find_session(&self, tenant_id: &str, session_id: &str) -> StoreResult<Option<ExecutionRecord>> {
        let sql = format!(
            "SELECT {EXECUTION_COLUMNS} FROM executions WHERE tenant_id = $1 AND session_id = $2 ORDER BY id DESC LIMIT 1"
        );
        Ok(on_pool!(self, |pool| sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
            .bind(tenant_id)
            .bind(session_id)
            .fetch_optional(pool)
            .await?))
    }

    async fn list_sessions(
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
        Ok(on_pool!(self, |pool| sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
            .bind(tenant_id)
            .bind(after_session_id.unwrap_or(""))
            .bind(limit)
            .fetch_all(pool)
            .await?))
    }

    async fn insert_turn(&self, t: &TurnRecord) -> StoreResult<()> {
        let (outcome, retried) = on_pool!(@attempts self, |pool| {
            sqlx::query(
            "INSERT INTO turns (id, execution_id, tenant_id, generation, turn_number, state, stop_reason, failure_reason, failure_message, started_at_ms, ended_at_ms, credential_name, session_config, usage) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
        )
        .bind(&t.id)
        .bind(&t.execution_id)
        .bind(&t.tenant_id)
        .bind(t.generation)
        .bind(t.turn_number)
        .bind(&t.state)
        .bind(&t.stop_reason)
        .bind(&t.failure_reason)
        .bind(&t.failure_message)
        .bind(t.started_at_ms)
        .bind(t.ended_at_ms)
        .bind(&t.credential_name)
        .bind(&t.session_config)
        .bind(&t.usage)
        .execute(pool)
        .await?
        .rows_affected()
        });
        already_there_after_retry(outcome, retried)
    }

    async fn settle_turn(&self, t: &TurnRecord) -> StoreResult<bool> {
        let (outcome, retried) = on_pool!(@attempts self, |pool| {
            sqlx::query(
            "UPDATE turns SET state = $1, stop_reason = $2, failure_reason = $3, failure_message = $4, ended_at_ms = $5, usage = $6 \
             WHERE id = $7 AND generation = $8 AND state = 'running'"
        )
        .bind(&t.state)
        .bind(&t.stop_reason)
        .bind(&t.failure_reason)
        .bind(&t.failure_message)
        .bind(t.ended_at_ms)
        .bind(&t.usage)
        .bind(&t.id)
        .bind(t.generation)
        .execute(pool)
        .await?
        .rows_affected()
        });
        match outcome? {
            1 => Ok(true),
            // The attempt that failed may have committed: then the row is already ours.
            _ if retried => Ok(self.turn_state(&t.id, t.generation).await?.as_deref() == Some(t.state.as_str())),
            _ => Ok(false),
        }
    }

    async fn get_turn(&self, tenant_id: &str, id: &str) -> StoreResult<Option<TurnRecord>> {
        let sql = format!("SELECT {TURN_COLUMNS} FROM turns WHERE tenant_id = $1 AND id = $2");
        Ok(on_pool!(self, |pool| sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
            .bind(tenant_id)
            .bind(id)
            .fetch_optional(pool)
            .await?))
    }

    async fn list_turns(
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
        Ok(on_pool!(self, |pool| sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
            .bind(tenant_id)
            .bind(execution_id)
            .bind(after_number)
            .bind(limit)
            .fetch_all(pool)
            .await?))
    }

    async fn insert_interaction(&self, i: &InteractionRecord) -> StoreResult<()> {
        let (outcome, retried) = on_pool!(@attempts self, |pool| {
            sqlx::query(
            "INSERT INTO interactions (id, execution_id, tenant_id, generation, turn_id, native_request_id, kind, state, etag, request, outcome, answer_request_id, answer_fingerprint, reason, delivery, replay_allowed, created_at_ms, updated_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)"
        )
        .bind(&i.id)
        .bind(&i.execution_id)
        .bind(&i.tenant_id)
        .bind(i.generation)
        .bind(&i.turn_id)
        .bind(&i.native_request_id)
        .bind(&i.kind)
        .bind(&i.state)
        .bind(&i.etag)
        .bind(&i.request)
        .bind(&i.outcome)
        .bind(&i.answer_request_id)
        .bind(&i.answer_fingerprint)
        .bind(&i.reason)
        .bind(&i.delivery)
        .bind(i.replay_allowed)
        .bind(i.created_at_ms)
        .bind(i.updated_at_ms)
        .execute(pool)
        .await?
        .rows_affected()
        });
        already_there_after_retry(outcome, retried)
    }

    async fn transition_interaction(&self, expected_state: &str, i: &InteractionRecord) -> StoreResult<bool> {
        let (outcome, retried) = on_pool!(@attempts self, |pool| {
            sqlx::query(
                "UPDATE interactions SET state = $1, outcome = $2, answer_request_id = $3, answer_fingerprint = $4, \
             reason = $5, delivery = $6, replay_allowed = $7, updated_at_ms = $8 \
             WHERE id = $9 AND generation = $10 AND state = $11 \
             AND EXISTS (SELECT 1 FROM executions e WHERE e.id = interactions.execution_id AND e.generation = $10)",
            )
            .bind(&i.state)
            .bind(&i.outcome)
            .bind(&i.answer_request_id)
            .bind(&i.answer_fingerprint)
            .bind(&i.reason)
            .bind(&i.delivery)
            .bind(i.replay_allowed)
            .bind(i.updated_at_ms)
            .bind(&i.id)
            .bind(i.generation)
            .bind(expected_state)
            .execute(pool)
            .await?
            .rows_affected()
        });
        match outcome? {
            1 => Ok(true),
            // The attempt that failed may have committed: then the row is already `next`.
            _ if retried => {
                Ok(self.interaction_state(&i.id, i.generation).await? == Some((i.state.clone(), i.updated_at_ms)))
            }
            _ => Ok(false),
        }
    }

    async fn get_interaction(&self, tenant_id: &str, id: &str) -> StoreResult<Option<InteractionRecord>> {
        Ok(on_pool!(self, |pool| sqlx::query_as(
            "SELECT * FROM interactions WHERE tenant_id = $1 AND id = $2"
        )
        .bind(tenant_id)
        .bind(id)
        .fetch_optional(pool)
        .await?))
    }

    async fn list_interactions(&self, q: &InteractionQuery) -> StoreResult<Vec<InteractionRecord>> {
        Ok(on_pool!(self, |pool| sqlx::query_as(
            "SELECT * FROM interactions WHERE tenant_id = $1 AND ($2 = '' OR execution_id = $2) \
             AND ($3 = '' OR state = $3) AND id > $4 ORDER BY id LIMIT $5"
        )
        .bind(&q.tenant_id)
        .bind(q.execution_id.as_deref().unwrap_or(""))
        .bind(q.state.as_deref().unwrap_or(""))
        .bind(q.after_id.as_deref().unwrap_or(""))
        .bind(q.limit)
        .fetch_all(pool)
        .await?))
    }

    async fn append_events(&self, events: &[EventRecord]) -> StoreResult<()> {
        if events.is_empty() {
            return Ok(());
        }
        // One statement, fenced: the rows go in only while the execution's generation is
        // theirs, so a superseded writer can never append (no extra round trip).
        let (execution_id, generation) = (&events[0].execution_id, events[0].generation);
        if events
            .iter()
            .any(|e| e.execution_id != *execution_id || e.generation != generation)
        {
            return Err(StoreError::Database(
                "one append carries one execution's events of one generation".into(),
            ));
        }
        let (outcome, retried) = on_pool!(@attempts self, |pool| {
            let mut builder = QueryBuilder::new(
                "INSERT INTO events (execution_id, sequence, event_id, generation, turn_id, item_id, event_type, priority, schema_version, emitted_at_ms, payload) SELECT * FROM (",
            );
            builder.push_values(events, |mut row, e| {
                row.push_bind(&e.execution_id)
                    .push_bind(e.sequence)
                    .push_bind(&e.event_id)
                    .push_bind(e.generation)
                    .push_bind(&e.turn_id)
                    .push_bind(&e.item_id)
                    .push_bind(&e.event_type)
                    .push_bind(e.priority)
                    .push_bind(e.schema_version)
                    .push_bind(e.emitted_at_ms)
                    .push_bind(&e.payload);
            });
            builder
                .push(") AS appended WHERE EXISTS (SELECT 1 FROM executions WHERE id = ")
                .push_bind(execution_id)
                .push(" AND generation = ")
                .push_bind(generation)
                .push(")");
            builder.build().execute(pool).await?.rows_affected()
        });
        match outcome {
            // The attempt that failed committed: the rows are ours (one writer per
            // execution assigns these sequences).
            Err(StoreError::Duplicate) if retried => Ok(()),
            Ok(0) => Err(StoreError::Fenced),
            other => other.map(drop),
        }
    }

    async fn read_events(&self, execution_id: &str, after_sequence: i64, limit: i64) -> StoreResult<Vec<EventRecord>> {
        Ok(on_pool!(self, |pool| {
            sqlx::query_as("SELECT * FROM events WHERE execution_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3")
                .bind(execution_id)
                .bind(after_sequence)
                .bind(limit)
                .fetch_all(pool)
                .await?
        }))
    }

    async fn head_sequence(&self, execution_id: &str) -> StoreResult<i64> {
        let (head,): (Option<i64>,) = on_pool!(self, |pool| sqlx::query_as(
            "SELECT MAX(sequence) FROM events WHERE execution_id = $1"
        )
        .bind(execution_id)
        .fetch_one(pool)
        .await?);
        Ok(head.unwrap_or(0))
    }

    async fn oldest_sequence(&self, execution_id: &str) -> StoreResult<Option<i64>> {
        let (oldest,): (Option<i64>,) = on_pool!(self, |pool| sqlx::query_as(
            "SELECT MIN(sequence) FROM events WHERE execution_id = $1"
        )
        .bind(execution_id)
        .fetch_one(pool)
        .await?);
        Ok(oldest)
    }

    async fn prune_events(
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

    async fn acknowledged_executions(&self, after_id: Option<&str>, limit: i64) -> StoreResult<Vec<(String, i64)>> {
        Ok(on_pool!(self, |pool| sqlx::query_as(
            "SELECT id, acked_sequence FROM executions WHERE acked_sequence > 0 AND id > $1 ORDER BY id LIMIT $2"
        )
        .bind(after_id.unwrap_or(""))
        .bind(limit)
        .fetch_all(pool)
        .await?))
    }

    async fn advance_generation(&self, tenant_id: &str, execution_id: &str, expected: i64) -> StoreResult<bool> {
        let n = on_pool!(self, |pool| {
            sqlx::query(
                "UPDATE executions SET generation = generation + 1 WHERE tenant_id = $1 AND id = $2 AND generation = $3",
            )
            .bind(tenant_id)
            .bind(execution_id)
            .bind(expected)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n == 1)
    }

    async fn set_acked_sequence(&self, tenant_id: &str, execution_id: &str, through: i64) -> StoreResult<()> {
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

#[cfg(test)]
mod tests {
    use super::{operation_name, redact_url};

    #[test]
    fn an_operation_is_named_by_its_store_method() {
        fn here() {}
        assert_eq!(
            operation_name(std::any::type_name_of_val(&here)),
            "an_operation_is_named_by_its_store_method"
        );
        assert_eq!(
            operation_name("cursor_runner_store::sql::<impl Store for SqlStore>::insert_turn::{{closure}}::here"),
            "insert_turn"
        );
    }

    #[test]
    fn passwords_never_reach_error_messages() {
        assert_eq!(redact_url("mysql://u:secret@h/db"), "mysql://…@h/db");
        assert!(!redact_url("x://a:b@c").contains('b') || redact_url("x://a:b@c").ends_with("@c"));
    }
}
