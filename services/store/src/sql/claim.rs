//! The start-up "sole service" claim: one service process per database until replicas can
//! share one (a PostgreSQL session advisory lock; an exclusive lock on a file beside the
//! SQLite database).

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

use crate::contract::{StoreError, StoreResult};

/// The advisory lock key of the sole-service claim (`cursor-r` in ASCII).
const SOLE_SERVICE_LOCK_KEY: i64 = 0x6375_7273_6f72_2d72;

/// Where the claim is made and, once made, what holds it. Shared by every patience of one
/// store, so a claim made through one is held for all.
pub(super) struct SoleService {
    target: ClaimTarget,
    held: tokio::sync::Mutex<Option<Held>>,
}

enum ClaimTarget {
    /// A dedicated connection's options (the lock lives as long as that session).
    Postgres(Box<PgConnectOptions>),
    /// The SQLite file's lock file.
    SqliteFile(std::path::PathBuf),
    /// An in-memory database: nothing another process could share.
    None,
}

/// Kept, never read: the claim lasts as long as the value does.
#[allow(dead_code)]
enum Held {
    Postgres(PgConnection),
    SqliteFile(std::fs::File),
}

impl SoleService {
    pub(super) fn postgres(options: PgConnectOptions) -> Self {
        Self::at(ClaimTarget::Postgres(Box::new(options)))
    }

    /// Locks `<database>.service-lock` beside the database file.
    pub(super) fn sqlite_file(database: &std::path::Path) -> Self {
        let mut lock = database.as_os_str().to_owned();
        lock.push(".service-lock");
        Self::at(ClaimTarget::SqliteFile(lock.into()))
    }

    pub(super) fn unshared() -> Self {
        Self::at(ClaimTarget::None)
    }

    fn at(target: ClaimTarget) -> Self {
        Self {
            target,
            held: tokio::sync::Mutex::new(None),
        }
    }

    /// Makes the claim, or keeps the one already held; [`StoreError::AnotherService`]
    /// while another process holds it.
    pub(super) async fn claim(&self) -> StoreResult<()> {
        let mut held = self.held.lock().await;
        if held.is_some() {
            return Ok(());
        }
        *held = match &self.target {
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
                Some(Held::Postgres(connection))
            }
            ClaimTarget::SqliteFile(path) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(path)
                    .map_err(|e| StoreError::Database(format!("{}: {e}", path.display())))?;
                match file.try_lock() {
                    Ok(()) => Some(Held::SqliteFile(file)),
                    Err(std::fs::TryLockError::WouldBlock) => return Err(StoreError::AnotherService),
                    Err(std::fs::TryLockError::Error(e)) => {
                        return Err(StoreError::Database(format!("{}: {e}", path.display())));
                    }
                }
            }
        };
        Ok(())
    }
}
