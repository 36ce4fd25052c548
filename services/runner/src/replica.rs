//! `serve`'s replica flags: who this process is among the replicas on one PostgreSQL
//! database, and how long its ownership lease runs (`docs/scale-out.md` §1); and how it
//! stops once that lease is lost (§3).

use std::sync::Arc;

use cursor_runner_executions::Engine;
use cursor_runner_executions::ownership::{self, ReplicaConfig, ReplicaName};

/// `serve`'s exit status once its ownership lease is lost (`EX_TEMPFAIL`): the process holds
/// nothing worth keeping, and its restart under the same name settles what it owned.
pub const LEASE_LOST_EXIT: i32 = 75;

/// Resolves when `serve` should stop: when `stop` does (a drain or a signal), or at once
/// when the lease is lost.
pub async fn until_stopped_or_fenced(engine: Arc<Engine>, stop: impl std::future::Future<Output = ()>) {
    tokio::select! {
        () = stop => {}
        () = engine.lease_lost() => {
            tracing::error!("this replica's ownership lease ended: it writes nothing more, stops its agents and exits");
        }
    }
}

/// After the lease was lost: stops every agent, writing nothing, and exits
/// [`LEASE_LOST_EXIT`].
pub async fn exit_fenced(engine: &Engine) -> ! {
    engine.stop_fenced().await;
    std::process::exit(LEASE_LOST_EXIT)
}

#[derive(clap::Args)]
pub struct ReplicaArgs {
    /// This replica's stable name (in Kubernetes the pod name, `metadata.name`); default:
    /// the host name. A restart under the same name settles its predecessor's executions
    /// at once; other replicas' are never touched. Multi-replica mode: refused with the
    /// embedded SQLite store (MULTI_REPLICA_UNSUPPORTED).
    #[arg(long, env = "CURSOR_RUNNER_REPLICA_NAME")]
    replica_name: Option<ReplicaName>,
    /// How long each heartbeat extends this replica's ownership lease, measured on the
    /// database's clock.
    #[arg(long, env = "CURSOR_RUNNER_OWNERSHIP_LEASE_MS", default_value_t = ownership::LEASE_LENGTH.as_millis() as u64,
          value_parser = lease_ms)]
    ownership_lease_ms: u64,
}

fn lease_ms(text: &str) -> Result<u64, String> {
    let ms: u64 = text.parse().map_err(|e| format!("{e}"))?;
    ownership::lease_length(ms).map_err(|e| e.to_string())?;
    Ok(ms)
}

impl ReplicaArgs {
    pub fn config(&self) -> anyhow::Result<ReplicaConfig> {
        Ok(ReplicaConfig {
            name: self.replica_name.clone().unwrap_or_else(ReplicaName::of_host),
            name_given: self.replica_name.is_some(),
            lease: ownership::lease_length(self.ownership_lease_ms)?,
        })
    }
}
