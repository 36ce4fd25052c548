//! `serve`'s replica flags: who this process is among the replicas on one PostgreSQL
//! database, and how long its ownership lease runs (`docs/scale-out.md` §1).

use cursor_runner_executions::ownership::{self, ReplicaConfig, ReplicaName};

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
