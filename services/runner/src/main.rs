//! `cursor-runner`: serve the gRPC API, run migrations, or run the demo.

mod demo;
mod distribution;
mod doctor;
mod metrics_http;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use cursor_runner_executions::{Engine, EngineConfig};
use cursor_runner_supervisor::distribution::VerifyMode;
use cursor_runner_supervisor::{AgentCommand, PinnedDistribution};

#[derive(Parser)]
#[command(
    name = "cursor-runner",
    version,
    about = "Runs Cursor's coding agent for a control plane over gRPC"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the gRPC API.
    Serve(ServeArgs),
    /// Create or upgrade the database schema, then exit.
    Migrate {
        #[arg(long, env = "CURSOR_RUNNER_DATABASE_URL")]
        database_url: String,
    },
    /// Serve in-process on the embedded store, run a scripted turn against the fake
    /// agent, answer its question through the API, and print the event stream.
    Demo(demo::DemoArgs),
    /// Pin, verify or install a Cursor distribution.
    #[command(subcommand)]
    Distribution(distribution::DistributionCommand),
    /// Report what this host offers and lacks (exit 1 when something required is
    /// missing), or with --probe, probe the agent without a credential.
    Doctor(doctor::DoctorArgs),
    /// Ask a running service's `grpc.health.v1` whether it serves: exit 0 when
    /// SERVING, 1 otherwise (draining, store unreachable, nothing listening). For probes.
    Healthcheck(HealthcheckArgs),
}

#[derive(clap::Args)]
struct HealthcheckArgs {
    /// Address of the service's gRPC listener.
    #[arg(long, env = "CURSOR_RUNNER_HEALTHCHECK_ADDR", default_value = "127.0.0.1:50051")]
    addr: String,
    /// The service to ask about (`""` is the server as a whole).
    #[arg(long, default_value = cursor_runner_api::RUNNER_SERVICE_NAME)]
    service: String,
    /// Seconds to wait for the connection and the answer.
    #[arg(long, default_value_t = 5)]
    timeout_secs: u64,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address of the gRPC listener.
    #[arg(long, env = "CURSOR_RUNNER_LISTEN", default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Address of the Prometheus `/metrics` HTTP listener (OpenMetrics text); off when unset.
    #[arg(long, env = "CURSOR_RUNNER_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Bearer tokens per tenant (JSON with sha256 digests, re-read when it changes). Without
    /// it callers are unauthenticated and name their tenant in `x-tenant-id`.
    #[arg(long, env = "CURSOR_RUNNER_TOKENS_FILE")]
    tokens_file: Option<PathBuf>,
    /// `postgres://…` (production) or `sqlite:PATH` (single node). Default: SQLite in the state directory.
    #[arg(long, env = "CURSOR_RUNNER_DATABASE_URL")]
    database_url: Option<String>,
    /// The agent command line, e.g. `/opt/cursor/node /opt/cursor/index.js acp` or a fake agent.
    #[arg(
        long,
        env = "CURSOR_RUNNER_AGENT_COMMAND",
        required_unless_present = "distribution_manifest",
        conflicts_with = "distribution_manifest"
    )]
    agent_command: Option<String>,
    /// A pinned Cursor distribution's manifest: the agent is then launched only from the
    /// verified closure in `--distribution-dir`, re-checked before every launch.
    #[arg(long, env = "CURSOR_RUNNER_DISTRIBUTION_MANIFEST", requires = "distribution_dir")]
    distribution_manifest: Option<PathBuf>,
    /// The materialized closure of the pinned distribution.
    #[arg(long, env = "CURSOR_RUNNER_DISTRIBUTION_DIR")]
    distribution_dir: Option<PathBuf>,
    /// Re-hash the whole closure before each launch (default: file set, sizes, modes).
    #[arg(long, env = "CURSOR_RUNNER_DISTRIBUTION_FULL_VERIFY")]
    distribution_full_verify: bool,
    /// Where private agent homes and the default SQLite database live.
    #[arg(long, env = "CURSOR_RUNNER_STATE_DIR", default_value = ".cursor-runner")]
    state_dir: PathBuf,
    /// Seconds a cancelled turn may take to settle before its agent is stopped.
    #[arg(long, env = "CURSOR_RUNNER_CANCEL_GRACE_SECS", default_value_t = 15)]
    cancel_grace_secs: u64,
    /// Seconds between SIGTERM and SIGKILL when stopping an agent.
    #[arg(long, env = "CURSOR_RUNNER_STOP_GRACE_SECS", default_value_t = 5)]
    stop_grace_secs: u64,
    /// Seconds of silence before an event stream gets a heartbeat.
    #[arg(long, env = "CURSOR_RUNNER_HEARTBEAT_SECS", default_value_t = 15)]
    heartbeat_secs: u64,
    /// Run each agent as PID 1's child in its own PID namespace (under this binary's
    /// `agent-init`) when the host permits it; `false` leaves only the fallbacks
    /// (parent-death signal, process group, subreaper, launch ledger).
    #[arg(long, env = "CURSOR_RUNNER_PID_NAMESPACE", default_value_t = true, action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new())]
    pid_namespace: bool,
}

fn main() -> anyhow::Result<()> {
    // Hidden mode `agent-init -- <program> <args…>`: PID 1 of an agent's own PID
    // namespace (see `cursor_runner_supervisor::agent_init`). Dispatched before anything
    // else starts: no runtime, no logging, and stdout belongs to the agent.
    if std::env::args_os().nth(1).is_some_and(|arg| arg == "agent-init") {
        cursor_runner_supervisor::agent_init::main(std::env::args_os().skip(2));
    }
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CURSOR_RUNNER_LOG").unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => serve(args).await,
            Command::Migrate { database_url } => {
                cursor_runner_store::connect(&database_url).await.context("migrating")?;
                println!("migrations applied");
                Ok(())
            }
            Command::Demo(args) => demo::run(args).await,
            Command::Distribution(command) => distribution::run(command),
            Command::Healthcheck(args) => {
                if healthcheck(args).await {
                    Ok(())
                } else {
                    std::process::exit(1)
                }
            }
            Command::Doctor(args) => {
                if doctor::run(args).await? {
                    Ok(())
                } else {
                    std::process::exit(1)
                }
            }
        }
    })
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.state_dir).with_context(|| format!("creating {}", args.state_dir.display()))?;
    let state_dir = std::fs::canonicalize(&args.state_dir)?;
    let database_url = args
        .database_url
        .unwrap_or_else(|| format!("sqlite:{}", state_dir.join("cursor-runner.db").display()));
    let store = cursor_runner_store::connect(&database_url)
        .await
        .context("opening the store")?;
    let agent_command = match (&args.agent_command, &args.distribution_manifest, &args.distribution_dir) {
        (Some(command), _, _) => AgentCommand::parse(command)?,
        (None, Some(manifest), Some(dir)) => {
            let pin = distribution::load_pin(manifest, distribution::platform(None)?)?;
            let pinned = PinnedDistribution {
                closure_dir: std::fs::canonicalize(dir)?,
                pin,
                verify_mode: if args.distribution_full_verify {
                    VerifyMode::Full
                } else {
                    VerifyMode::Quick
                },
            };
            // Refuse to serve from a closure that does not match, rather than fail every launch.
            cursor_runner_supervisor::distribution::verify(&pinned.closure_dir, &pinned.pin, VerifyMode::Full)?;
            AgentCommand::pinned(pinned)
        }
        _ => anyhow::bail!("give --agent-command, or --distribution-manifest with --distribution-dir"),
    };
    let mut config = EngineConfig::new(agent_command, state_dir);
    config.cancel_grace = std::time::Duration::from_secs(args.cancel_grace_secs);
    config.stop_grace = std::time::Duration::from_secs(args.stop_grace_secs);
    config.heartbeat_interval = std::time::Duration::from_secs(args.heartbeat_secs);
    config.agent_init = Some(std::env::current_exe().context("locating this binary for agent-init")?);
    config.pid_namespace = args.pid_namespace;
    let engine = Engine::start(store.clone(), config).await?;
    let listener = cursor_runner_api::bind(args.listen)
        .await
        .context("binding the listener")?;
    let metrics_server = match args.metrics_listen {
        Some(address) => {
            let metrics_listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("binding the metrics listener {address}"))?;
            tracing::info!(address = %metrics_listener.local_addr()?, "serving /metrics");
            let metrics = engine.metrics().clone();
            Some(tokio::spawn(async move {
                if let Err(e) = metrics_http::serve(metrics, metrics_listener, std::future::pending()).await {
                    tracing::error!(error = %e, "the metrics listener failed");
                }
            }))
        }
        None => None,
    };
    tracing::info!(address = %listener.local_addr()?, store = store.backend(), "serving");
    let auth = match &args.tokens_file {
        Some(path) => Some(std::sync::Arc::new(cursor_runner_api::TokenAuth::from_file(path)?)),
        None => {
            tracing::warn!(
                "no --tokens-file: callers are not authenticated and name their tenant in x-tenant-id; listen on loopback only"
            );
            None
        }
    };
    cursor_runner_api::serve_with(engine.clone(), listener, shutdown_signal(), auth).await?;
    tracing::info!("shutting down: stopping every agent");
    engine.shutdown().await;
    if let Some(metrics_server) = metrics_server {
        metrics_server.abort();
    }
    Ok(())
}

/// Prints the status and says whether it is SERVING.
async fn healthcheck(args: HealthcheckArgs) -> bool {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;

    let limit = std::time::Duration::from_secs(args.timeout_secs);
    let uri = if args.addr.contains("://") {
        args.addr.clone()
    } else {
        format!("http://{}", args.addr)
    };
    let check = async {
        let channel = tonic::transport::Endpoint::from_shared(uri)?
            .connect_timeout(limit)
            .connect()
            .await?;
        let response = HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: args.service.clone(),
            })
            .await?;
        anyhow::Ok(response.into_inner().status())
    };
    match tokio::time::timeout(limit, check).await {
        Ok(Ok(ServingStatus::Serving)) => {
            println!("SERVING");
            true
        }
        Ok(Ok(status)) => {
            println!("{}", status.as_str_name());
            false
        }
        Ok(Err(e)) => {
            eprintln!("healthcheck of {} failed: {e:#}", args.addr);
            false
        }
        Err(_) => {
            eprintln!("healthcheck of {} timed out after {limit:?}", args.addr);
            false
        }
    }
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
