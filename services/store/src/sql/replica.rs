//! This process's replica row and the locks that make its name its own
//! (`docs/scale-out.md` §1). On PostgreSQL a dedicated identity connection, outside the
//! pool (a busy pool cannot starve the heartbeat), holds two session advisory locks: a
//! shared one a pre-scale-out service's exclusive sole-service lock excludes (both ways),
//! and the replica name's. On SQLite an exclusive lock on a file beside the database keeps
//! it to one process (D12), whose lease never ends.
//!
//! Every lease time is the database's (`DB_NOW_MS`); the caller's clock is never used.

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

use super::connection::{Pool, SqlStore, on_pool};
use crate::contract::{StoreError, StoreResult};
use crate::replica::*;

/// The advisory lock key of the pre-scale-out sole-service claim (`cursor-r` in ASCII):
/// such a service holds it exclusively, every replica shared.
const SOLE_SERVICE_LOCK_KEY: i64 = 0x6375_7273_6f72_2d72;

/// `DB_NOW_MS`, the one lease clock, per backend.
const PG_NOW_MS: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";
const SQLITE_NOW_MS: &str = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)";

/// Where the identity is held and, once registered, what holds it. Shared by every
/// patience of one store.
pub(super) struct Identity {
    target: Target,
    held: tokio::sync::Mutex<Held>,
    registered: std::sync::OnceLock<Registered>,
}

enum Target {
    /// A dedicated connection's options (the locks live as long as that session).
    Postgres(Box<PgConnectOptions>),
    /// The SQLite file's lock file.
    SqliteFile(std::path::PathBuf),
    /// An in-memory database: nothing another process could share.
    Unshared,
}

/// Kept for what it holds: the locks last as long as the value does.
enum Held {
    Nothing,
    /// `None`: the connection was lost or timed out; the next heartbeat re-opens it.
    Postgres(Option<PgConnection>),
    #[allow(dead_code)]
    SqliteFile(std::fs::File),
    /// Registered with nothing to lock (an in-memory database).
    Unshared,
    Ended,
}

struct Registered {
    incarnation: String,
    name: String,
    terms: LeaseTerms,
}

impl Identity {
    pub(super) fn postgres(options: PgConnectOptions) -> Self {
        Self::at(Target::Postgres(Box::new(options)))
    }

    /// Locks `<database>.service-lock` beside the database file.
    pub(super) fn sqlite_file(database: &std::path::Path) -> Self {
        let mut lock = database.as_os_str().to_owned();
        lock.push(".service-lock");
        Self::at(Target::SqliteFile(lock.into()))
    }

    pub(super) fn unshared() -> Self {
        Self::at(Target::Unshared)
    }

    fn at(target: Target) -> Self {
        Self {
            target,
            held: tokio::sync::Mutex::new(Held::Nothing),
            registered: std::sync::OnceLock::new(),
        }
    }

    /// The incarnation this store writes as owner ([`LEGACY_INCARNATION`] until registered).
    pub(super) fn me(&self) -> &str {
        self.registered
            .get()
            .map_or(LEGACY_INCARNATION, |r| r.incarnation.as_str())
    }
}

/// Opens the identity connection and takes both locks on it.
async fn locked_connection(options: &PgConnectOptions, name: &str) -> StoreResult<PgConnection> {
    let mut connection = PgConnection::connect_with(options).await?;
    let (shared,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_lock_shared($1)")
        .bind(SOLE_SERVICE_LOCK_KEY)
        .fetch_one(&mut connection)
        .await?;
    if !shared {
        connection.close().await?;
        return Err(StoreError::AnotherService);
    }
    let (named,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_lock(hashtextextended($1, 0))")
        .bind(format!("{REPLICA_NAME_LOCK_PREFIX}{name}"))
        .fetch_one(&mut connection)
        .await?;
    if !named {
        connection.close().await?;
        return Err(StoreError::ReplicaNameInUse(name.to_owned()));
    }
    Ok(connection)
}

fn lock_file(path: &std::path::Path) -> StoreResult<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| StoreError::Database(format!("{}: {e}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::AnotherService),
        Err(std::fs::TryLockError::Error(e)) => Err(StoreError::Database(format!("{}: {e}", path.display()))),
    }
}

/// Runs one statement on the identity connection (PostgreSQL) or the pool (SQLite).
macro_rules! on_identity {
    ($self:ident, $connection:expr, |$executor:ident| $body:expr) => {{
        match (&$self.shared.pool, $connection) {
            (Pool::Postgres(_), Some($executor)) => $body,
            (Pool::Postgres($executor), None) => $body,
            (Pool::Sqlite($executor), _) => $body,
        }
    }};
}

impl SqlStore {
    fn now_ms_sql(&self) -> &'static str {
        match self.shared.pool {
            Pool::Postgres(_) => PG_NOW_MS,
            Pool::Sqlite(_) => SQLITE_NOW_MS,
        }
    }

    /// The lease length to add to the database's now; `None` on SQLite, whose lease never
    /// ends (one process per file: nobody to fence against).
    fn lease_ms(&self, terms: LeaseTerms) -> Option<i64> {
        match self.shared.pool {
            Pool::Postgres(_) => Some(i64::try_from(terms.length.as_millis()).unwrap_or(i64::MAX)),
            Pool::Sqlite(_) => None,
        }
    }

    pub(super) async fn register_replica(&self, name: &str, terms: LeaseTerms) -> StoreResult<Registration> {
        let identity = &self.shared.identity;
        let mut held = identity.held.lock().await;
        if !matches!(*held, Held::Nothing) {
            return Err(StoreError::Database("this store registered its replica already".into()));
        }
        let mut connection = match &identity.target {
            Target::Postgres(options) => Some(locked_connection(options, name).await?),
            Target::SqliteFile(path) => {
                *held = Held::SqliteFile(lock_file(path)?);
                None
            }
            Target::Unshared => None,
        };
        let incarnation = uuid::Uuid::now_v7().to_string();
        let now = self.now_ms_sql();
        // On PostgreSQL only same-name predecessors are known dead (their name lock is ours);
        // on SQLite the file lock proves every earlier process is gone.
        let same_name = matches!(self.shared.pool, Pool::Postgres(_));
        let insert = format!(
            "INSERT INTO replicas (incarnation, name, address, state, capacity, started_at_ms, heartbeat_at_ms, lease_until_ms) \
             VALUES ($1, $2, NULL, 'serving', '{{}}', {now}, {now}, COALESCE({now} + $3, {max})) RETURNING lease_until_ms",
            max = i64::MAX
        );
        let predecessors_sql = "SELECT incarnation FROM replicas \
             WHERE state <> 'ended' AND incarnation <> $1 AND (name = $2 OR NOT $3) ORDER BY incarnation";
        let end_sql = format!(
            "UPDATE replicas SET state = 'ended', \
             lease_until_ms = CASE WHEN lease_until_ms < {now} THEN lease_until_ms ELSE {now} END \
             WHERE incarnation = $1"
        );
        let lease_ms = self.lease_ms(terms);
        let (lease_until_ms,): (i64,) = on_identity!(self, connection.as_mut(), |executor| {
            sqlx::query_as(sqlx::AssertSqlSafe(insert.clone()))
                .bind(&incarnation)
                .bind(name)
                .bind(lease_ms)
                .fetch_one(executor)
                .await?
        });
        let found: Vec<(String,)> = on_identity!(self, connection.as_mut(), |executor| {
            sqlx::query_as(predecessors_sql)
                .bind(&incarnation)
                .bind(name)
                .bind(same_name)
                .fetch_all(executor)
                .await?
        });
        let mut predecessors = vec![LEGACY_INCARNATION.to_owned()];
        for (predecessor,) in found {
            on_identity!(self, connection.as_mut(), |executor| {
                sqlx::query(sqlx::AssertSqlSafe(end_sql.clone()))
                    .bind(&predecessor)
                    .execute(executor)
                    .await?
                    .rows_affected()
            });
            predecessors.push(predecessor);
        }
        if let Some(connection) = connection {
            *held = Held::Postgres(Some(connection));
        } else if matches!(identity.target, Target::Unshared) {
            *held = Held::Unshared;
        }
        let _ = identity.registered.set(Registered {
            incarnation: incarnation.clone(),
            name: name.to_owned(),
            terms,
        });
        Ok(Registration {
            incarnation,
            name: name.to_owned(),
            lease_until_ms,
            predecessors,
        })
    }

    pub(super) async fn renew_replica_lease(&self) -> StoreResult<Renewal> {
        let identity = &self.shared.identity;
        let Some(me) = identity.registered.get() else {
            return Err(StoreError::Database("no replica registered to renew".into()));
        };
        let mut held = identity.held.lock().await;
        if matches!(*held, Held::Ended) {
            return Ok(Renewal::Lost);
        }
        let now = self.now_ms_sql();
        let renew = format!(
            "UPDATE replicas SET heartbeat_at_ms = {now}, lease_until_ms = COALESCE({now} + $2, lease_until_ms) \
             WHERE incarnation = $1 AND state <> 'ended' AND lease_until_ms > {now} RETURNING lease_until_ms"
        );
        let lease_ms = self.lease_ms(me.terms);
        let renewed: Option<(i64,)> = match (&identity.target, &mut *held) {
            (Target::Postgres(options), Held::Postgres(slot)) => {
                // A connection found broken is re-opened once, at once.
                let mut attempts_left = 2;
                loop {
                    attempts_left -= 1;
                    if slot.is_none() {
                        // A lost identity connection lost its locks: re-take them first. A
                        // same-name successor holding the name has ended this incarnation.
                        match locked_connection(options, &me.name).await {
                            Ok(connection) => *slot = Some(connection),
                            Err(StoreError::ReplicaNameInUse(_) | StoreError::AnotherService) => {
                                return Ok(Renewal::Lost);
                            }
                            Err(e) => return Err(e),
                        }
                    }
                    let connection = slot.as_mut().expect("opened above");
                    let attempt = sqlx::query_as(sqlx::AssertSqlSafe(renew.clone()))
                        .bind(&me.incarnation)
                        .bind(lease_ms)
                        .fetch_optional(connection);
                    match tokio::time::timeout(me.terms.renew_timeout, attempt).await {
                        Ok(Ok(row)) => break row,
                        Ok(Err(e)) => {
                            *slot = None;
                            if attempts_left == 0 {
                                return Err(e.into());
                            }
                        }
                        Err(_) => {
                            *slot = None;
                            return Err(StoreError::Unavailable("the lease renewal timed out".into()));
                        }
                    }
                }
            }
            _ => on_identity!(self, None::<&mut PgConnection>, |executor| {
                sqlx::query_as(sqlx::AssertSqlSafe(renew.clone()))
                    .bind(&me.incarnation)
                    .bind(lease_ms)
                    .fetch_optional(executor)
                    .await?
            }),
        };
        Ok(match renewed {
            Some((lease_until_ms,)) => Renewal::Held { lease_until_ms },
            None => Renewal::Lost,
        })
    }

    pub(super) async fn end_replica(&self) -> StoreResult<()> {
        let identity = &self.shared.identity;
        let Some(me) = identity.registered.get() else {
            return Ok(());
        };
        let mut held = identity.held.lock().await;
        let now = self.now_ms_sql();
        let end = format!(
            "UPDATE replicas SET state = 'ended', \
             lease_until_ms = CASE WHEN lease_until_ms < {now} THEN lease_until_ms ELSE {now} END \
             WHERE incarnation = $1"
        );
        let outcome = match &mut *held {
            Held::Postgres(Some(connection)) => sqlx::query(sqlx::AssertSqlSafe(end))
                .bind(&me.incarnation)
                .execute(connection)
                .await
                .map(drop),
            _ => match &self.shared.pool {
                Pool::Postgres(pool) => sqlx::query(sqlx::AssertSqlSafe(end))
                    .bind(&me.incarnation)
                    .execute(pool)
                    .await
                    .map(drop),
                Pool::Sqlite(pool) => sqlx::query(sqlx::AssertSqlSafe(end))
                    .bind(&me.incarnation)
                    .execute(pool)
                    .await
                    .map(drop),
            },
        };
        // The locks go with the connection (or file) either way: this process is done.
        if let Held::Postgres(Some(connection)) = std::mem::replace(&mut *held, Held::Ended) {
            let _ = connection.close().await;
        }
        Ok(outcome?)
    }

    pub(super) async fn execution_owner(
        &self,
        tenant_id: &str,
        execution_id: &str,
    ) -> StoreResult<Option<ExecutionOwner>> {
        let row: Option<(String, Option<String>)> = on_pool!(self, |pool| sqlx::query_as(
            "SELECT e.owner_incarnation, r.name FROM executions e \
             LEFT JOIN replicas r ON r.incarnation = e.owner_incarnation WHERE e.tenant_id = $1 AND e.id = $2"
        )
        .bind(tenant_id)
        .bind(execution_id)
        .fetch_optional(pool)
        .await?);
        Ok(row.map(|(incarnation, name)| ExecutionOwner {
            incarnation,
            name: name.unwrap_or_default(),
        }))
    }
}
