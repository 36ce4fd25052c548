//! A fresh store per test: in memory, a SQLite file in a temporary directory, or a
//! uniquely named PostgreSQL database created on the local server (`DATABASE_URL` names
//! another) and dropped after the test, whether it passed or not.

use std::future::Future;
use std::sync::Arc;

use cursor_runner_store::{MemoryStore, SqlStore, Store};
use sqlx::Connection;

/// The server the PostgreSQL tests use unless `DATABASE_URL` names another.
const DEFAULT_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

#[derive(Debug, Clone, Copy)]
pub enum Backend {
    Memory,
    Sqlite,
    Postgres,
}

/// A database that lives for one test.
pub enum Scratch {
    Nothing,
    /// Removed with the directory when dropped.
    SqliteDir {
        _dir: tempfile::TempDir,
    },
    Postgres {
        admin_url: String,
        name: String,
    },
}

impl Scratch {
    pub fn sqlite() -> (Self, String) {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite:{}", dir.path().join("store.db").display());
        (Self::SqliteDir { _dir: dir }, url)
    }

    pub async fn postgres() -> (Self, String) {
        let admin_url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_ADMIN_URL.to_owned());
        let name = format!("cr_store_{}", uuid::Uuid::new_v4().simple());
        admin(&admin_url, &format!("CREATE DATABASE {name}")).await;
        let server = admin_url
            .rsplit_once('/')
            .map_or(admin_url.as_str(), |(server, _)| server);
        let url = format!("{server}/{name}");
        (Self::Postgres { admin_url, name }, url)
    }

    pub async fn remove(self) {
        if let Self::Postgres { admin_url, name } = self {
            admin(&admin_url, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
        }
    }
}

async fn admin(admin_url: &str, statement: &str) {
    let mut connection = sqlx::PgConnection::connect(admin_url).await.unwrap_or_else(|e| {
        panic!(
            "PostgreSQL is not reachable at {admin_url} ({e}); start the local cluster or set \
             DATABASE_URL to a server you can create databases on"
        )
    });
    sqlx::query(sqlx::AssertSqlSafe(statement.to_owned()))
        .execute(&mut connection)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
}

/// Runs `behaviour` on a fresh store of `backend`, then removes its database; a failure
/// of the behaviour is reported after the clean-up.
pub async fn run<B, F>(backend: Backend, behaviour: B)
where
    B: FnOnce(Arc<dyn Store>) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let (scratch, url) = match backend {
        Backend::Memory => (Scratch::Nothing, None),
        Backend::Sqlite => {
            let (scratch, url) = Scratch::sqlite();
            (scratch, Some(url))
        }
        Backend::Postgres => {
            let (scratch, url) = Scratch::postgres().await;
            (scratch, Some(url))
        }
    };
    let store: Arc<dyn Store> = match url {
        None => Arc::new(MemoryStore::new()),
        Some(url) => Arc::new(SqlStore::connect(&url).await.expect("connect and migrate")),
    };
    let outcome = tokio::spawn(behaviour(store)).await;
    scratch.remove().await;
    if let Err(failure) = outcome {
        std::panic::resume_unwind(failure.into_panic());
    }
}
