//! This process's identity as a replica: what holds its locks (`docs/scale-out.md` §1).
//! On PostgreSQL a dedicated identity connection, outside the pool (a busy pool cannot
//! starve the heartbeat), holds two session advisory locks: a shared one a pre-scale-out
//! service's exclusive sole-service lock excludes (both ways), and the replica name's. On
//! SQLite an exclusive lock on a file beside the database keeps it to one process (D12).
//! `replica` runs the statements; `connection` keeps one [`Identity`] per store.

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

use crate::contract::{StoreError, StoreResult};
use crate::replica::*;

/// The advisory lock key of the pre-scale-out sole-service claim (`cursor-r` in ASCII):
/// such a service holds it exclusively, every replica shared.
const SOLE_SERVICE_LOCK_KEY: i64 = 0x6375_7273_6f72_2d72;

/// Where the identity is held and, once registered, what holds it. Shared by every
/// patience of one store.
pub(super) struct Identity {
    pub(super) target: Target,
    pub(super) held: tokio::sync::Mutex<Held>,
    pub(super) registered: std::sync::OnceLock<Registered>,
}

pub(super) enum Target {
    /// A dedicated connection's options (the locks live as long as that session).
    Postgres(Box<PgConnectOptions>),
    /// The SQLite file's lock file.
    SqliteFile(std::path::PathBuf),
    /// An in-memory database: nothing another process could share.
    Unshared,
}

/// Kept for what it holds: the locks last as long as the value does.
pub(super) enum Held {
    Nothing,
    /// `None`: the connection was lost or timed out; the next heartbeat re-opens it.
    Postgres(Option<PgConnection>),
    #[allow(dead_code)]
    SqliteFile(std::fs::File),
    /// Registered with nothing to lock (an in-memory database).
    Unshared,
    Ended,
}

pub(super) struct Registered {
    pub(super) incarnation: String,
    pub(super) name: String,
    pub(super) terms: LeaseTerms,
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

    /// The `$me` of the owner fence: this incarnation once registered; `None` before, when
    /// writes are fenced by generation only.
    pub(super) fn fence_owner(&self) -> Option<&str> {
        self.registered.get().map(|r| r.incarnation.as_str())
    }

    /// The incarnation this store writes as owner ([`LEGACY_INCARNATION`] until registered).
    pub(super) fn me(&self) -> &str {
        self.registered
            .get()
            .map_or(LEGACY_INCARNATION, |r| r.incarnation.as_str())
    }

    /// Whether `incarnation` is this store's own, registered one (the legacy incarnation is
    /// every unregistered process's, so no one's own).
    pub(super) fn is_me(&self, incarnation: &str) -> bool {
        self.registered
            .get()
            .is_some_and(|r| r.incarnation.as_str() == incarnation)
    }
}

/// Opens the identity connection, takes both locks on it, and has the server cancel any
/// statement on it that runs past `statement_timeout` (a renewal's bound).
pub(super) async fn locked_connection(
    options: &PgConnectOptions,
    name: &str,
    statement_timeout: std::time::Duration,
) -> StoreResult<PgConnection> {
    let mut connection = PgConnection::connect_with(options).await?;
    sqlx::query("SELECT set_config('statement_timeout', $1, false)")
        .bind(format!("{}ms", statement_timeout.as_millis().max(1)))
        .execute(&mut connection)
        .await?;
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

pub(super) fn lock_file(path: &std::path::Path) -> StoreResult<std::fs::File> {
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
