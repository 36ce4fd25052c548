//! Backend setup: the pool for a URL (PostgreSQL or SQLite), migrations on connect, and
//! `on_pool!`, which runs one statement on either pool with the observer's timing and the
//! store's [`Patience`] for transient failures.

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{PgPool, SqlitePool};
use std::str::FromStr;
use std::sync::Arc;

use super::append_group::AppendGroups;
use super::fence::{Dialect, Statements};
use super::identity::Identity;
use super::one_statement::OneStatements;
use crate::contract::*;
use crate::notify::UnannouncedHeads;
use crate::replica::OwnerFence;

static PG_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/postgres");
static SQLITE_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite");

/// Connections a service opens to PostgreSQL.
const PG_MAX_CONNECTIONS: u32 = 8;
// An operation tries past every pooled session the server may have ended.
const _: () = assert!(crate::retry::LOST_SESSION_RETRIES >= PG_MAX_CONNECTIONS);

/// How long an operation waits for a connection before it fails `Unavailable`: while the
/// database is down, a caller gets a typed answer it can retry instead of its own deadline.
const PG_ACQUIRE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
/// How long the server lets one of the pool's sessions sit idle inside a transaction
/// before it ends that session (`idle_in_transaction_session_timeout`). Every transaction
/// here sends its statements back to back, so only a frozen process (SIGSTOP, a paused
/// VM) idles: its open transaction would otherwise hold the execution row it locked
/// `FOR SHARE`, and a survivor's takeover claim would wait on it for ever. The frozen
/// owner's transaction is rolled back, never committed; under the self-fence margin
/// (2 s), so it is gone before the lease ends on the database's clock. A live process
/// stalled this long mid-transaction loses the connection and retries the transaction.
pub const IDLE_IN_TRANSACTION_LIMIT: std::time::Duration = std::time::Duration::from_secs(1);
/// How long a pooled connection may have sat idle and still be handed out without a ping.
/// The pool's default pings before every use: one more round trip (and two wake-ups of
/// each side) in front of every statement, on an answer's way to the agent too. (sqlx still
/// pings each connection as it is released, off the caller's path.) A session the server
/// ended (a restart, a terminated backend) is found before use only once its connection
/// idled this long; one released less than this before fails its next statement instead:
/// the operation is tried again at once on the next connection, patience or not
/// (`retry::LOST_SESSION_RETRIES`).
pub const PING_AFTER_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether a connection idle for `idle_for` is pinged before it is handed out.
fn pinged_before_use(idle_for: std::time::Duration) -> bool {
    idle_for >= PING_AFTER_IDLE
}

pub(super) enum Pool {
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

/// Runs `$body` on whichever pool this store has (the expression is compiled once per
/// backend), timing each attempt for the observer under the name of the method it is in (a
/// `Store` method: a small closed set), and retrying transient failures as the store's
/// [`Patience`] says. `on_pool!(@attempts …)` yields `(outcome, retried)` for the methods
/// that must tell "already there" after a retry from a real conflict; `on_pool!(@owner_write
/// …)` is that for an owner write, which is refused locally ([`StoreError::Fenced`], no
/// round trip) before each attempt once this replica's lease has passed its local deadline.
macro_rules! on_pool {
    ($self:ident, |$pool:ident| $body:expr) => {{ on_pool!(@attempts $self, |$pool| $body).0? }};
    (@attempts $self:ident, |$pool:ident| $body:expr) => {{ on_pool!(@checked $self, $crate::contract::StoreResult::<()>::Ok(()), |$pool| $body) }};
    (@owner_write $self:ident, |$pool:ident| $body:expr) => {{
        on_pool!(@checked $self, $self.shared.fence.owner_write_allowed(), |$pool| $body)
    }};
    (@checked $self:ident, $check:expr, |$pool:ident| $body:expr) => {{
        fn here() {}
        let operation = $crate::sql::connection::operation_name(std::any::type_name_of_val(&here));
        let mut attempts = $crate::retry::Attempts::new($self.patience, std::time::Instant::now());
        loop {
            let started = std::time::Instant::now();
            let outcome: $crate::contract::StoreResult<_> = async {
                $check?;
                Ok(match &$self.shared.pool {
                    $crate::sql::connection::Pool::Postgres($pool) => $body,
                    $crate::sql::connection::Pool::Sqlite($pool) => $body,
                })
            }
            .await;
            $self.observe(operation, started.elapsed(), outcome.is_ok());
            if let Err(e) = &outcome
                && e.is_transient()
                && let Some(pause) = attempts.after_transient_failure(std::time::Instant::now(), e)
            {
                tracing::warn!(operation, error = %e, retry_in_ms = pause.as_millis() as u64, "store unavailable; retrying");
                tokio::time::sleep(pause).await;
                continue;
            }
            break (outcome, attempts.retried());
        }
    }};
}
pub(super) use on_pool;

/// `…::SqlStore>::insert_execution::{{closure}}::here` → `insert_execution`.
pub(super) fn operation_name(path: &'static str) -> &'static str {
    path.rsplit("::")
        .find(|segment| *segment != "here" && !segment.starts_with('{'))
        .unwrap_or("unknown")
}

/// The one SQL implementation of [`Store`] for both backends.
pub struct SqlStore {
    pub(super) shared: Arc<Shared>,
    pub(super) patience: Patience,
}

/// What every patience of one store shares.
pub(super) struct Shared {
    pub(super) pool: Pool,
    pub(super) observer: std::sync::OnceLock<Arc<dyn StoreObserver>>,
    /// This process as a replica: its locks, and the incarnation it writes as owner.
    pub(super) identity: Identity,
    /// The owner writes' statements, as this backend spells them.
    pub(super) statements: Statements,
    /// The lease watch every owner write checks before any I/O.
    pub(super) fence: OwnerFence,
    /// Where commits leave the event heads to announce (PostgreSQL only; `sql::announce`).
    pub(super) unannounced: Option<Arc<UnannouncedHeads>>,
    /// Where event appends wait to be committed in groups (PostgreSQL only;
    /// `sql::append_group`).
    pub(super) appends: Option<Arc<AppendGroups>>,
    /// The batches committed as one statement (PostgreSQL only; `sql::one_statement`).
    pub(super) one_statement: Option<OneStatements>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(heads) = &self.unannounced {
            heads.store_dropped();
        }
    }
}

impl SqlStore {
    /// `postgres://…` or `sqlite:PATH` / `sqlite::memory:`; migrations run on connect.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let identity;
        let pool = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let options = PgConnectOptions::from_str(url)?;
            identity = Identity::postgres(options.clone());
            // The pool retries a refused or unauthenticated connection until its acquire
            // timeout and then reports only "pool timed out"; one direct connection first
            // fails at once with the server's real answer.
            PgConnection::connect_with(&options).await?.close().await?;
            let idle_limit = format!("{}ms", IDLE_IN_TRANSACTION_LIMIT.as_millis());
            Pool::Postgres(
                PgPoolOptions::new()
                    .max_connections(PG_MAX_CONNECTIONS)
                    .acquire_timeout(PG_ACQUIRE_TIMEOUT)
                    .test_before_acquire(false)
                    .before_acquire(|connection, meta| {
                        Box::pin(async move {
                            if pinged_before_use(meta.idle_for) {
                                connection.ping().await?;
                            }
                            Ok(true)
                        })
                    })
                    .connect_with(options.options([("idle_in_transaction_session_timeout", idle_limit.as_str())]))
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
            identity = if url.contains(":memory:") {
                Identity::unshared()
            } else {
                Identity::sqlite_file(options.get_filename())
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
        let dialect = match pool {
            Pool::Postgres(_) => Dialect::POSTGRES,
            Pool::Sqlite(_) => Dialect::SQLITE,
        };
        let postgres = matches!(pool, Pool::Postgres(_));
        let unannounced = postgres.then(Arc::<UnannouncedHeads>::default);
        let appends = postgres.then(|| Arc::new(AppendGroups::new(dialect)));
        let statements = Statements::new(dialect);
        let one_statement = postgres.then(|| OneStatements::new(&statements, dialect));
        let store = Self {
            shared: Arc::new(Shared {
                pool,
                observer: std::sync::OnceLock::new(),
                identity,
                statements,
                fence: OwnerFence::default(),
                unannounced,
                appends,
                one_statement,
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

    pub(super) fn observe(&self, operation: &'static str, took: std::time::Duration, ok: bool) {
        if let Some(observer) = self.shared.observer.get() {
            observer.observed(operation, took, ok);
        }
    }
}

/// An insert retried after a transient failure that finds its row already there: the
/// failed attempt committed (the ids are the writer's own), so it succeeded.
pub(super) fn already_there_after_retry(outcome: StoreResult<u64>, retried: bool) -> StoreResult<()> {
    match outcome {
        Err(StoreError::Duplicate) if retried => Ok(()),
        other => other.map(drop),
    }
}

/// [`already_there_after_retry`] for an insert guarded by the execution's generation:
/// no row inserted means the execution is no longer at that generation (or is unknown).
pub(super) fn inserted_unless_fenced(outcome: StoreResult<u64>, retried: bool) -> StoreResult<()> {
    match outcome {
        Ok(0) => Err(StoreError::Fenced),
        other => already_there_after_retry(other, retried),
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

#[cfg(test)]
mod tests {
    use super::{PING_AFTER_IDLE, operation_name, pinged_before_use, redact_url};
    use std::time::Duration;

    #[test]
    fn a_connection_is_pinged_once_it_idled_the_bound_and_not_before() {
        assert!(!pinged_before_use(Duration::ZERO));
        assert!(!pinged_before_use(PING_AFTER_IDLE - Duration::from_nanos(1)));
        assert!(pinged_before_use(PING_AFTER_IDLE));
    }

    #[test]
    fn an_operation_is_named_by_its_store_method() {
        fn here() {}
        assert_eq!(
            operation_name(std::any::type_name_of_val(&here)),
            "an_operation_is_named_by_its_store_method"
        );
        assert_eq!(
            operation_name(
                "cursor_runner_store::sql::turns::<impl cursor_runner_store::sql::connection::SqlStore>::insert_turn::{{closure}}::here"
            ),
            "insert_turn"
        );
    }

    #[test]
    fn passwords_never_reach_error_messages() {
        assert_eq!(redact_url("mysql://u:secret@h/db"), "mysql://…@h/db");
        assert!(!redact_url("x://a:b@c").contains('b') || redact_url("x://a:b@c").ends_with("@c"));
    }
}
