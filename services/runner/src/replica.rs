//! `serve`'s replica flags: who this process is among the replicas on one PostgreSQL
//! database, and how long its ownership lease runs (`docs/scale-out.md` §1); and how it
//! stops once that lease is lost (§3).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use cursor_runner_api::{FleetToken, ForwardTls, Forwarder, TlsReloader};
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
    /// Where this replica takes the calls other replicas forward to it for the executions
    /// it owns (any replica answers any call: a call for an execution another replica owns
    /// is forwarded there, one hop). Over TLS with the gRPC listener's certificate when it
    /// has one (then `--internal-tls-ca` and `--internal-tls-domain` are needed), else
    /// plaintext: loopback, or a network only the fleet reaches with `--allow-plaintext`.
    /// Needs `--fleet-token-file`.
    #[arg(long, env = "CURSOR_RUNNER_INTERNAL_LISTEN", requires = "fleet_token_file")]
    internal_listen: Option<SocketAddr>,
    /// The `host:port` other replicas reach `--internal-listen` at (in Kubernetes the pod
    /// IP, `status.podIP`, and the internal port); default: the internal listener's own
    /// address, unless it listens on every interface.
    #[arg(long, env = "CURSOR_RUNNER_ADVERTISE_ADDRESS", requires = "internal_listen")]
    advertise_address: Option<String>,
    /// The secret every replica of the fleet shares (at least 32 visible ASCII
    /// characters): forwarded calls carry it, and the internal listener takes no call
    /// without it.
    #[arg(long, env = "CURSOR_RUNNER_FLEET_TOKEN_FILE", requires = "internal_listen")]
    fleet_token_file: Option<PathBuf>,
    /// The CA (PEM) that signed the replicas' certificates, which this replica verifies
    /// when it forwards a call (internal listeners serve TLS when `--tls-cert` is set).
    #[arg(long, env = "CURSOR_RUNNER_INTERNAL_TLS_CA", requires = "internal_listen")]
    internal_tls_ca: Option<PathBuf>,
    /// The name every replica's certificate carries (replicas are dialled by address, so
    /// the certificate is checked for this name instead; in Kubernetes the Service's name).
    #[arg(long, env = "CURSOR_RUNNER_INTERNAL_TLS_DOMAIN", requires = "internal_tls_ca")]
    internal_tls_domain: Option<String>,
}

/// This replica's place in a fleet that forwards calls: its internal listener, the
/// address it advertises, the shared token, and how it verifies the others' listeners
/// (`None`: they are plaintext).
pub struct Fleet {
    pub listener: tokio::net::TcpListener,
    pub address: String,
    pub token: Arc<FleetToken>,
    pub tls: Option<ForwardTls>,
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
            address: None,
        })
    }

    /// Binds the internal listener and reads the fleet token, when this replica forwards
    /// calls; `None` when it does not (`--internal-listen` unset). `tls`: the gRPC listener
    /// serves TLS, and so does the internal one.
    pub async fn fleet(&self, tls: bool, allow_plaintext: bool) -> anyhow::Result<Option<Fleet>> {
        let (Some(listen), Some(token_file)) = (self.internal_listen, &self.fleet_token_file) else {
            return Ok(None);
        };
        let token = Arc::new(FleetToken::from_file(token_file)?);
        let tls = match (tls, &self.internal_tls_ca, &self.internal_tls_domain) {
            (true, Some(ca), Some(domain)) => Some(ForwardTls {
                ca_pem: std::fs::read_to_string(ca).with_context(|| format!("reading {}", ca.display()))?,
                domain: domain.clone(),
            }),
            (true, _, _) => anyhow::bail!(
                "the internal listener serves TLS with --tls-cert: give --internal-tls-ca and --internal-tls-domain, \
                 so that replicas verify each other"
            ),
            (false, None, _) => None,
            (false, Some(_), _) => {
                anyhow::bail!("--internal-tls-ca needs --tls-cert: the internal listener serves TLS only with it")
            }
        };
        anyhow::ensure!(
            tls.is_some() || listen.ip().is_loopback() || allow_plaintext,
            "refusing a plaintext internal listener on {listen}: give --tls-cert, listen on loopback, or pass \
             --allow-plaintext on a private network the fleet alone reaches"
        );
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding the internal listener {listen}"))?;
        let bound = listener.local_addr()?;
        let address = match &self.advertise_address {
            Some(address) => advertised(address)?,
            None if bound.ip().is_unspecified() => anyhow::bail!(
                "--internal-listen {listen} listens on every interface: give --advertise-address, the host:port \
                 other replicas reach it at"
            ),
            None => bound.to_string(),
        };
        tracing::info!(listen = %bound, advertised = %address, "taking forwarded calls");
        Ok(Some(Fleet {
            listener,
            address,
            token,
            tls,
        }))
    }
}

impl Fleet {
    /// Serves the internal listener in the background; the forwarder that carries this
    /// replica's calls to the others. A listener that fails drains the replica: it could no
    /// longer answer for its executions, which another replica then serves after it exits.
    pub fn serve(self, engine: Arc<Engine>, tls: Option<Arc<TlsReloader>>) -> (Arc<Forwarder>, InternalServer) {
        let forwarder = Arc::new(Forwarder::new(self.token.clone(), self.tls, engine.metrics().clone()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let stopped = async {
                let _ = stopped.await;
            };
            let served =
                cursor_runner_api::serve_internal(engine.clone(), self.listener, stopped, self.token, tls).await;
            if let Err(e) = served {
                tracing::error!(error = %e, "the internal listener failed: draining this replica");
                engine.begin_drain(None);
            }
        });
        (forwarder, InternalServer { stop, task })
    }
}

/// The internal listener, serving until [`InternalServer::stop`].
pub struct InternalServer {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl InternalServer {
    /// Takes no more forwarded calls; the open ones get `SHUTDOWN_GRACE` to finish.
    pub async fn stop(self) {
        let Self { stop, mut task } = self;
        let _ = stop.send(());
        if tokio::time::timeout(cursor_runner_api::SHUTDOWN_GRACE, &mut task)
            .await
            .is_err()
        {
            task.abort();
        }
    }
}

/// Longest `--advertise-address` accepted (a DNS name's 253 characters and a port).
pub const MAX_ADVERTISE_ADDRESS_CHARS: usize = 260;

/// An advertised address: `host:port`, the host a name or an IP address (IPv6 in brackets).
fn advertised(address: &str) -> anyhow::Result<String> {
    let malformed = || anyhow::anyhow!("--advertise-address `{address}` is not host:port");
    anyhow::ensure!(address.len() <= MAX_ADVERTISE_ADDRESS_CHARS, malformed());
    let (host, port) = address.rsplit_once(':').ok_or_else(malformed)?;
    port.parse::<std::num::NonZeroU16>().map_err(|_| malformed())?;
    let bracketed = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
    let host_ok = match bracketed {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        }
    };
    anyhow::ensure!(host_ok, malformed());
    Ok(address.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_advertised_address_is_host_and_port() {
        for good in [
            "10.0.0.7:50052",
            "runner-0.runner.ns.svc:50052",
            "[fd00::7]:50052",
            "localhost:1",
        ] {
            assert_eq!(advertised(good).unwrap(), good);
        }
        let longest = format!("{}:50052", "a".repeat(MAX_ADVERTISE_ADDRESS_CHARS - 6));
        assert!(advertised(&longest).is_ok());
        for bad in [
            "10.0.0.7",
            "10.0.0.7:0",
            "10.0.0.7:99999",
            ":50052",
            "fd00::7:50052",
            "http://10.0.0.7:50052",
            "a b:50052",
            &format!("a{longest}"),
        ] {
            assert!(advertised(bad).is_err(), "{bad}");
        }
    }
}
