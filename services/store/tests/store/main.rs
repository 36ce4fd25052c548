//! The store's behavioural suite: every behaviour is one `async fn(Arc<dyn Store>)`, run
//! against the in-memory store, SQLite and PostgreSQL (the reference), each on a fresh
//! database; plus the check that the two migration trees make the same schema.

/// Instantiates `async fn name(store: Arc<dyn Store>)` behaviours once per backend:
/// `<file>::memory::<name>`, `<file>::sqlite::<name>`, `<file>::postgres::<name>`.
macro_rules! on_every_backend {
    ($($name:ident),+ $(,)?) => {
        on_every_backend!(@on memory Memory $($name),+);
        on_every_backend!(@on sqlite Sqlite $($name),+);
        on_every_backend!(@on postgres Postgres $($name),+);
    };
    (@on $module:ident $backend:ident $($name:ident),+) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    crate::backends::run(crate::backends::Backend::$backend, super::$name).await
                }
            )+
        }
    };
}

mod backends;
mod batch;
mod events;
mod executions;
mod fence;
mod fixtures;
mod idempotency;
mod interactions;
/// The store's tests and the service's share one cuttable link.
#[path = "../../../../tests/support/pg_link.rs"]
#[allow(dead_code, reason = "the service's tests use what these do not")]
mod link;
mod notify;
mod replicas;
mod schema;
mod sessions;
mod takeover;
mod turns;
mod unknown_state;
