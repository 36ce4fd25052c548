//! End-to-end behaviour through the real gRPC API, with the fake agent as a real
//! child process and a real database. Every behavioural test runs on PostgreSQL (the
//! reference store) and on the embedded SQLite store.

/// Instantiates `async fn name(backend: Backend)` tests once per backend.
macro_rules! on_both_backends {
    ($($name:ident),+ $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(cursor_runner_e2e::Backend::Postgres).await
                }
            )+
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(cursor_runner_e2e::Backend::Sqlite).await
                }
            )+
        }
    };
}

mod agent_callers;
mod api_surface;
mod audit;
mod auth;
mod children;
mod conformance;
mod conformance_codex;
mod continuity;
mod credentials;
mod distribution;
mod drain;
mod durable;
mod idempotency;
mod interactions;
mod limits;
mod mcp;
mod metrics;
mod orphans;
mod peer_fixtures;
mod peer_matrix;
mod pool;
mod process;
mod profiles;
mod prompts;
mod racing_answers;
mod session;
mod stalls;
mod statements;
mod streaming;
mod transcripts;
mod turns;
