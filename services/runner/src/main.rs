//! `cursor-runner`: serve the gRPC API, run migrations, or run the demo.

mod database_url;
mod demo;
mod distribution;
mod doctor;
mod metrics_http;
mod ready_file;
mod replica;
mod telemetry;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use cursor_runner_executions::{Engine, EngineConfig};
use cursor_runner_pool::{PoolConfig, RestartIntensity, WarmProfile};
use cursor_runner_supervisor::distribution::VerifyMode;
use cursor_runner_supervisor::{AgentCommand, PinnedDistribution};

#[derive(Parser)]
#[command(
    name = "cursor-runner",
    version,
    about = "Runs Cursor's coding agent for a control plane over gRPC"
)]
struct Cli {
    /// Log lines as text or JSON (one object per line), on stderr.
    #[arg(
        long,
        global = true,
        env = "CURSOR_RUNNER_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: telemetry::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the gRPC API.
    Serve(Box<ServeArgs>),
    /// Create or upgrade the database schema, then exit.
    Migrate(database_url::DatabaseArgs),
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
    /// Provision the unprivileged accounts agents run as (`cursor-agent-0` … in group
    /// `cursor-agents`); idempotent. Needs root. Run once per host or image.
    SetupAgentUsers {
        /// How many: at least the pool's `--pool-max-processes`.
        #[arg(long, default_value_t = 64)]
        count: u32,
        /// The first uid (and the group's gid).
        #[arg(long, default_value_t = cursor_runner_supervisor::agent_users::DEFAULT_FIRST_AGENT_UID)]
        first_uid: u32,
    },
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
    /// Connect with TLS, trusting this CA (PEM); the address may also be `https://…`.
    #[arg(long, env = "CURSOR_RUNNER_HEALTHCHECK_CA")]
    ca: Option<PathBuf>,
    /// The name the server's certificate must carry, when it is not the address's host
    /// (a probe dials 127.0.0.1; the certificate names the Service).
    #[arg(long, env = "CURSOR_RUNNER_HEALTHCHECK_TLS_DOMAIN", requires = "ca")]
    tls_domain: Option<String>,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address of the gRPC listener.
    #[arg(long, env = "CURSOR_RUNNER_LISTEN", default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Address of the Prometheus `/metrics` HTTP listener (OpenMetrics text); off when unset.
    #[arg(long, env = "CURSOR_RUNNER_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Once every listener is bound, their addresses are written here as JSON
    /// (`{"grpc", "metrics", "internal"}`): for a supervisor, or a listener on port 0.
    #[arg(long, env = "CURSOR_RUNNER_READY_FILE")]
    ready_file: Option<PathBuf>,
    /// Bearer tokens (and client certificates) per tenant (JSON with sha256 digests, re-read
    /// when it changes). Without it callers are unauthenticated and name their tenant in
    /// `x-tenant-id`.
    #[arg(long, env = "CURSOR_RUNNER_TOKENS_FILE")]
    tokens_file: Option<PathBuf>,
    /// The listener's TLS certificate chain (PEM), reloaded when it changes.
    #[arg(long, env = "CURSOR_RUNNER_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The listener's TLS private key (PEM), reloaded when it changes.
    #[arg(long, env = "CURSOR_RUNNER_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// CA (PEM) that client certificates are verified against; a verified certificate can
    /// stand for a tenant (`client_cert_sha256` in the tokens file).
    #[arg(long, env = "CURSOR_RUNNER_TLS_CLIENT_CA", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Serve plaintext on a non-loopback address (behind a TLS-terminating proxy on a
    /// private network). Without it, a non-loopback listener needs TLS.
    #[arg(long, env = "CURSOR_RUNNER_ALLOW_PLAINTEXT")]
    allow_plaintext: bool,
    /// The store (default: SQLite in the state directory).
    #[command(flatten)]
    database: database_url::DatabaseArgs,
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
    /// Seconds a drain (SIGTERM or `AdminService.Drain`) lets running turns finish before
    /// it cancels them; a second SIGTERM forces it at once.
    #[arg(long, env = "CURSOR_RUNNER_DRAIN_DEADLINE_SECS", default_value_t = 30)]
    drain_deadline_secs: u64,
    /// Acknowledged events older than this are pruned from the outbox (never one the
    /// control plane has not acknowledged, never an execution's newest); 0 keeps every event.
    #[arg(long, env = "CURSOR_RUNNER_EVENT_RETENTION_SECS", default_value_t = 7 * 24 * 3600)]
    event_retention_secs: u64,
    /// The turn deadline of an execution whose request and tenant policy name none; a turn
    /// past it is cancelled (`deadline_exceeded`). 0: no default.
    #[arg(long, env = "CURSOR_RUNNER_DEFAULT_TURN_DEADLINE_SECS", default_value_t = 2 * 3600)]
    default_turn_deadline_secs: u64,
    /// How long a turn may go without a message from the agent, while no question, plan
    /// or permission waits on a human, before it is cancelled (`agent_idle`). 0: off.
    #[arg(long, env = "CURSOR_RUNNER_TURN_IDLE_TIMEOUT_SECS", default_value_t = 15 * 60)]
    turn_idle_timeout_secs: u64,
    /// How long an execution's writes retry a database that does not answer (a restart, a
    /// fail-over) before the execution fails `STORE_UNAVAILABLE`; meanwhile the agent's
    /// output waits in its pipe, and nothing is dropped.
    #[arg(long, env = "CURSOR_RUNNER_STORE_OUTAGE_LIMIT_SECS", default_value_t = 30)]
    store_outage_limit_secs: u64,
    /// How long a completed call's outcome answers retries of its `request_id`; after it the
    /// key is deleted (in bounded batches) and the `request_id` is free again. 0 keeps every key.
    #[arg(long, env = "CURSOR_RUNNER_IDEMPOTENCY_RETENTION_SECS", default_value_t = 24 * 3600)]
    idempotency_retention_secs: u64,
    /// How often the retention sweeps (events, idempotency keys) run.
    #[arg(long, env = "CURSOR_RUNNER_RETENTION_SWEEP_SECS", default_value_t = 300)]
    retention_sweep_secs: u64,
    /// Capture each execution's raw wire traffic (both directions, secrets redacted, at
    /// most 8 MiB each) as `<DIR>/<execution id>.ndjson`, to turn a real build's traffic
    /// into fixture transcripts. Off by default.
    #[arg(long, env = "CURSOR_RUNNER_WIRE_CAPTURE_DIR")]
    wire_capture_dir: Option<PathBuf>,
    /// Per-tenant ceilings on execution limits (JSON: `{"default": {...}, "tenants": {"acme":
    /// {"turn_deadline_secs": 3600, "max_turns": 50, "max_active_secs": 36000}}}`).
    #[arg(long, env = "CURSOR_RUNNER_TENANT_LIMITS")]
    tenant_limits: Option<PathBuf>,
    /// Run each agent under its own provisioned unprivileged uid (`setup-agent-users`).
    /// On whenever the service runs as root, which then refuses to start without agent
    /// users; `false` runs agents as root (development only, and said loudly).
    #[arg(long, env = "CURSOR_RUNNER_AGENT_UID_SEPARATION", default_value_t = true, action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new())]
    agent_uid_separation: bool,
    /// What refused project configuration (MCP, hooks, plugins) appearing in a workspace
    /// mid-session does: `stop` the running turn (and say so), or only `warn`.
    #[arg(
        long,
        env = "CURSOR_RUNNER_ON_WORKSPACE_VIOLATION",
        value_enum,
        default_value = "stop"
    )]
    on_workspace_violation: WorkspaceViolation,
    /// Runner-owned MCP servers executions may name (JSON: `{"servers": [...]}` in ACP's
    /// `mcpServers` shape; stdio commands must be absolute paths). None by default.
    #[arg(long, env = "CURSOR_RUNNER_MCP_SERVERS")]
    mcp_servers: Option<PathBuf>,
    /// Agent profiles executions may name (`CreateExecution.agent_profile`), JSON:
    /// `{"profiles": {"NAME": {"argv": [...], "env": {...}, "credential_variables": [...],
    /// "authenticate": {"method_id": "…"}, "ask_mode": "…"}}}`; re-read when it changes.
    #[arg(long, env = "CURSOR_RUNNER_AGENT_PROFILES")]
    agent_profiles: Option<PathBuf>,
    #[command(flatten)]
    pool: PoolArgs,
    #[command(flatten)]
    replica: replica::ReplicaArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum WorkspaceViolation {
    Stop,
    Warn,
}

/// The supervised pool of agent processes.
#[derive(clap::Args)]
struct PoolArgs {
    /// Idle (warm) processes kept per profile once the profile is known: a profile is
    /// (distribution, tenant, credential), learned from a `CreateExecution`, or
    /// configured with --warm-profile. 0 starts every process on demand.
    #[arg(long, env = "CURSOR_RUNNER_POOL_MIN_IDLE", default_value_t = 0)]
    pool_min_idle: usize,
    /// Processes (warming, idle, leased) per profile.
    #[arg(long, env = "CURSOR_RUNNER_POOL_MAX_PER_PROFILE", default_value_t = 16)]
    pool_max_per_profile: usize,
    /// Processes (warming, idle, leased) on this node.
    #[arg(long, env = "CURSOR_RUNNER_POOL_MAX_PROCESSES", default_value_t = 64)]
    pool_max_processes: usize,
    /// Seconds after which an idle process is recycled.
    #[arg(long, env = "CURSOR_RUNNER_POOL_IDLE_TTL_SECS", default_value_t = 600)]
    pool_idle_ttl_secs: u64,
    /// Seconds without a lease after which a learned profile (and its credential, held
    /// in memory only) is forgotten.
    #[arg(long, env = "CURSOR_RUNNER_POOL_PROFILE_TTL_SECS", default_value_t = 1800)]
    pool_profile_ttl_secs: u64,
    /// Sessions one process may serve (same tenant and credential); 1 recycles each
    /// process after its session.
    #[arg(long, env = "CURSOR_RUNNER_POOL_SESSIONS_PER_PROCESS", default_value_t = 1)]
    pool_sessions_per_process: u32,
    /// At most N failed starts or crashes in SECONDS per profile (`N/SECONDS`); the
    /// next quarantines the profile for SECONDS.
    #[arg(long, env = "CURSOR_RUNNER_POOL_RESTART_INTENSITY", default_value = "5/60")]
    pool_restart_intensity: RestartIntensity,
    /// Seconds between liveness probes of an idle process (0: never).
    #[arg(long, env = "CURSOR_RUNNER_POOL_PROBE_SECS", default_value_t = 30)]
    pool_probe_secs: u64,
    /// A profile kept warm from the start, repeatable:
    /// `tenant=ID[,credential=CURSOR_API_KEY:/path/to/secret][,min_idle=N]`.
    #[arg(long = "warm-profile", value_name = "SPEC")]
    warm_profiles: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    // Hidden mode `agent-init -- <program> <args…>`: PID 1 of an agent's own PID
    // namespace (see `cursor_runner_supervisor::agent_init`). Dispatched before anything
    // else starts: no runtime, no logging, and stdout belongs to the agent.
    if std::env::args_os().nth(1).is_some_and(|arg| arg == "agent-init") {
        cursor_runner_supervisor::agent_init::main(std::env::args_os().skip(2));
    }
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let url_on_command_line = database_url::url_given_on_command_line(&matches);
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        // Dropped at the end of the command: spans still batched are flushed.
        let _telemetry = telemetry::init(cli.log_format)?;
        match cli.command {
            Command::Serve(args) => serve(*args, url_on_command_line).await,
            Command::Migrate(database) => {
                let database_url = database
                    .url(url_on_command_line)?
                    .context("give --database-url, CURSOR_RUNNER_DATABASE_URL or --database-url-file")?;
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
            Command::SetupAgentUsers { count, first_uid } => {
                cursor_runner_supervisor::agent_users::AgentUsers::provision(count, first_uid)?;
                println!("{count} agent users from uid {first_uid}");
                Ok(())
            }
            Command::Doctor(args) => {
                if doctor::run(args, url_on_command_line).await? {
                    Ok(())
                } else {
                    std::process::exit(1)
                }
            }
        }
    })
}

async fn serve(args: ServeArgs, url_on_command_line: bool) -> anyhow::Result<()> {
    // Refused before anything starts: a database password on the command line, unusable
    // tokens or TLS files, plaintext off loopback.
    let database_url = args.database.url(url_on_command_line)?;
    let options = serve_options(&args)?;
    std::fs::create_dir_all(&args.state_dir).with_context(|| format!("creating {}", args.state_dir.display()))?;
    let state_dir = std::fs::canonicalize(&args.state_dir)?;
    let agent_users = agent_users(&args, &state_dir)?;
    let database_url =
        database_url.unwrap_or_else(|| format!("sqlite:{}", state_dir.join("cursor-runner.db").display()));
    let store = cursor_runner_store::connect(&database_url)
        .await
        .context("opening the store")?;
    owner_only_sqlite_files(&database_url)?;
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
    config.drain_deadline = std::time::Duration::from_secs(args.drain_deadline_secs);
    config.pool = pool_config(&args.pool)?;
    config.replica = args.replica.config()?;
    let fleet = args.replica.fleet(options.tls.is_some(), args.allow_plaintext).await?;
    config.replica.address = fleet.as_ref().map(|fleet| fleet.address.clone());
    let retention = |keep_secs: u64| {
        (keep_secs > 0).then(|| cursor_runner_executions::retention::Retention {
            keep: std::time::Duration::from_secs(keep_secs),
            sweep_every: std::time::Duration::from_secs(args.retention_sweep_secs.max(1)),
        })
    };
    config.retention = retention(args.event_retention_secs);
    config.default_turn_deadline =
        (args.default_turn_deadline_secs > 0).then(|| std::time::Duration::from_secs(args.default_turn_deadline_secs));
    config.turn_idle_timeout =
        (args.turn_idle_timeout_secs > 0).then(|| std::time::Duration::from_secs(args.turn_idle_timeout_secs));
    config.store_outage_limit = std::time::Duration::from_secs(args.store_outage_limit_secs);
    config.idempotency_retention = retention(args.idempotency_retention_secs);
    config.wire_capture_dir = args.wire_capture_dir.clone();
    config.on_workspace_violation = match args.on_workspace_violation {
        WorkspaceViolation::Stop => cursor_runner_executions::ViolationAction::StopTurn,
        WorkspaceViolation::Warn => cursor_runner_executions::ViolationAction::Warn,
    };
    config.agent_users = agent_users;
    if let Some(path) = &args.tenant_limits {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        config.tenant_limits = cursor_runner_executions::limits::TenantLimits::parse(&text)?;
    }
    if let Some(path) = &args.mcp_servers {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        config.mcp_allowlist = cursor_runner_executions::mcp::McpAllowlist::parse(&text)?;
    }
    if let Some(path) = &args.agent_profiles {
        config.agent_profiles = Some(std::sync::Arc::new(
            cursor_runner_pool::agent_profile::AgentProfiles::from_file(path)?,
        ));
    }
    // Start-up refusals (ANOTHER_SERVICE, REPLICA_NAME_IN_USE, MULTI_REPLICA_UNSUPPORTED)
    // say their catalog reason.
    let engine = Engine::start(store.clone(), config)
        .await
        .map_err(|e| anyhow::anyhow!("{}: {}", e.reason.as_str(), e.message))?;
    let isolation = engine.agent_isolation();
    if !isolation.is_complete() {
        // Said once, in the words GetCapabilities and the AgentIsolation health entry use.
        tracing::warn!(reason = %isolation.reason(), "agents are not fully isolated");
    }
    let listener = cursor_runner_api::bind(args.listen)
        .await
        .context("binding the listener")?;
    let mut listening = ready_file::Listening {
        grpc: listener.local_addr()?,
        metrics: None,
        internal: fleet.as_ref().map(|fleet| fleet.listener.local_addr()).transpose()?,
    };
    let mut options = options;
    let internal_server = fleet.map(|fleet| {
        let (forwarder, server) = fleet.serve(engine.clone(), options.tls.clone());
        options.forwarder = Some(forwarder);
        server
    });
    let metrics_server = match args.metrics_listen {
        Some(address) => {
            let metrics_listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("binding the metrics listener {address}"))?;
            listening.metrics = Some(metrics_listener.local_addr()?);
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
    tracing::info!(
        address = %listener.local_addr()?,
        store = store.backend(),
        tls = options.tls.is_some(),
        authenticated = options.auth.is_some(),
        "serving gRPC and gRPC-Web"
    );
    if let Some(path) = &args.ready_file {
        ready_file::write(path, &listening).with_context(|| format!("writing {}", path.display()))?;
    }
    let stop = replica::until_stopped_or_fenced(engine.clone(), drain_on_signal(engine.clone()));
    cursor_runner_api::serve_with(engine.clone(), listener, stop, options).await?;
    // Calls forwarded here are answered until the public listener has closed too.
    if let Some(server) = internal_server {
        server.stop().await;
    }
    if engine.lease_has_ended() {
        replica::exit_fenced(&engine).await;
    }
    tracing::info!("shutting down: stopping every agent");
    engine.shutdown().await;
    if let Some(metrics_server) = metrics_server {
        metrics_server.abort();
    }
    Ok(())
}

/// The accounts agents run as. As root (and unless turned off) they are required: the
/// state directory then lets agents through to their homes and lists nothing, and the
/// service makes itself non-dumpable (no agent may read its memory or environment).
fn agent_users(
    args: &ServeArgs,
    state_dir: &std::path::Path,
) -> anyhow::Result<Option<cursor_runner_supervisor::agent_users::AgentUsers>> {
    use std::os::unix::fs::PermissionsExt;
    if !nix::unistd::geteuid().is_root() {
        tracing::warn!("not root: agents run as the service's own uid (no uid separation)");
        return Ok(None);
    }
    if !args.agent_uid_separation {
        tracing::warn!("--agent-uid-separation false: agents run as ROOT; development only");
        return Ok(None);
    }
    let users = cursor_runner_supervisor::agent_users::AgentUsers::discover();
    anyhow::ensure!(
        users.count() > 0,
        "running as root with no agent users: run `cursor-runner setup-agent-users --count N` first \
         (or --agent-uid-separation false, development only)"
    );
    if users.count() < args.pool.pool_max_processes {
        tracing::warn!(
            users = users.count(),
            max_processes = args.pool.pool_max_processes,
            "fewer agent users than --pool-max-processes: launches past them fail"
        );
    }
    std::fs::set_permissions(state_dir, std::fs::Permissions::from_mode(0o711))?;
    nix::sys::prctl::set_dumpable(false)?;
    tracing::info!(
        users = users.count(),
        "agents run under their own uids; the service is non-dumpable"
    );
    Ok(Some(users))
}

/// An embedded database's files are the service's alone (agents share the host).
fn owner_only_sqlite_files(database_url: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = database_url.strip_prefix("sqlite:").filter(|p| !p.starts_with(':')) else {
        return Ok(());
    };
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let file = format!("{path}{suffix}");
        if std::path::Path::new(&file).exists() {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
                .with_context(|| format!("restricting {file}"))?;
        }
    }
    Ok(())
}

/// Authentication and TLS for the listener, refusing what would send tokens in the clear:
/// plaintext off loopback needs `--allow-plaintext` (and gets a warning).
fn serve_options(args: &ServeArgs) -> anyhow::Result<cursor_runner_api::ServeOptions> {
    let auth = match &args.tokens_file {
        Some(path) => Some(std::sync::Arc::new(cursor_runner_api::TokenAuth::from_file(path)?)),
        None => {
            tracing::warn!(
                "no --tokens-file: callers are not authenticated and name their tenant in x-tenant-id; listen on loopback only"
            );
            None
        }
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(std::sync::Arc::new(cursor_runner_api::TlsReloader::new(
            cursor_runner_api::TlsSettings {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: args.tls_client_ca.clone(),
            },
        )?)),
        _ => None,
    };
    if tls.is_none() && !args.listen.ip().is_loopback() {
        anyhow::ensure!(
            args.allow_plaintext,
            "refusing to serve plaintext on {}: give --tls-cert and --tls-key, listen on loopback, \
             or pass --allow-plaintext behind a TLS-terminating proxy on a private network",
            args.listen
        );
        tracing::warn!(address = %args.listen, "serving PLAINTEXT on a non-loopback address (--allow-plaintext): tokens cross the network in the clear unless a proxy terminates TLS");
    }
    Ok(cursor_runner_api::ServeOptions {
        auth,
        tls,
        forwarder: None,
    })
}

/// Prints the status and says whether it is SERVING.
async fn healthcheck(args: HealthcheckArgs) -> bool {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;

    let limit = std::time::Duration::from_secs(args.timeout_secs);
    let scheme = if args.ca.is_some() { "https" } else { "http" };
    let uri = if args.addr.contains("://") {
        args.addr.clone()
    } else {
        format!("{scheme}://{}", args.addr)
    };
    let check = async {
        let mut endpoint = tonic::transport::Endpoint::from_shared(uri)?.connect_timeout(limit);
        if let Some(ca) = &args.ca {
            let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
            let mut tls =
                tonic::transport::ClientTlsConfig::new().ca_certificate(tonic::transport::Certificate::from_pem(pem));
            if let Some(domain) = &args.tls_domain {
                tls = tls.domain_name(domain.clone());
            }
            endpoint = endpoint.tls_config(tls)?;
        }
        let channel = endpoint.connect().await?;
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

/// Resolves when the service should stop serving: after a drain (begun by SIGTERM,
/// Ctrl-C or `AdminService.Drain`) has closed every execution, or at once on a second
/// signal (what is still running is then closed by `Engine::shutdown`).
async fn drain_on_signal(engine: std::sync::Arc<Engine>) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    let mut drained = engine.drained();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        _ = drained.wait_for(|done| *done) => return,
    }
    let deadline = engine.begin_drain(None);
    tracing::warn!(
        ?deadline,
        "draining: no new executions or turns; running turns may finish until the deadline"
    );
    tokio::select! {
        _ = drained.wait_for(|done| *done) => {}
        _ = tokio::signal::ctrl_c() => tracing::warn!("second signal: forcing the drain"),
        _ = term.recv() => tracing::warn!("second signal: forcing the drain"),
    }
}

fn pool_config(args: &PoolArgs) -> anyhow::Result<PoolConfig> {
    let secs = std::time::Duration::from_secs;
    Ok(PoolConfig {
        min_idle: args.pool_min_idle,
        max_per_profile: args.pool_max_per_profile.max(1),
        max_processes: args.pool_max_processes.max(1),
        idle_ttl: secs(args.pool_idle_ttl_secs),
        profile_ttl: secs(args.pool_profile_ttl_secs),
        sessions_per_process: args.pool_sessions_per_process.max(1),
        intensity: args.pool_restart_intensity,
        probe_interval: (args.pool_probe_secs > 0).then(|| secs(args.pool_probe_secs)),
        probe_timeout: secs(5),
        warm_profiles: args
            .warm_profiles
            .iter()
            .map(|spec| warm_profile(spec))
            .collect::<anyhow::Result<_>>()?,
    })
}

/// `tenant=ID[,credential=NAME:/path][,min_idle=N]`. The secret is read from the file
/// (trailing whitespace trimmed) and kept in memory only.
fn warm_profile(spec: &str) -> anyhow::Result<WarmProfile> {
    use cursor_runner_supervisor::{BoundCredential, CredentialName, Secret};
    let mut profile = WarmProfile {
        tenant_id: String::new(),
        credential: None,
        min_idle: 1,
    };
    for part in spec.split(',') {
        let (key, value) = part
            .split_once('=')
            .with_context(|| format!("--warm-profile `{spec}`: `{part}` is not key=value"))?;
        match key.trim() {
            "tenant" => profile.tenant_id = value.trim().to_owned(),
            "min_idle" => profile.min_idle = value.trim().parse().context("--warm-profile min_idle")?,
            "credential" => {
                let (name, path) = value
                    .split_once(':')
                    .context("--warm-profile credential is NAME:/path/to/secret")?;
                let name = CredentialName::parse(name.trim())
                    .with_context(|| format!("--warm-profile: `{name}` is not CURSOR_API_KEY or CURSOR_AUTH_TOKEN"))?;
                let secret = std::fs::read_to_string(path.trim())
                    .with_context(|| format!("--warm-profile: reading the credential file {path}"))?;
                let secret = secret.trim_end();
                anyhow::ensure!(
                    !secret.is_empty(),
                    "--warm-profile: the credential file {path} is empty"
                );
                profile.credential = Some(BoundCredential {
                    name,
                    secret: Secret::new(secret),
                });
            }
            other => anyhow::bail!("--warm-profile `{spec}`: unknown key `{other}`"),
        }
    }
    anyhow::ensure!(!profile.tenant_id.is_empty(), "--warm-profile `{spec}` names no tenant");
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::warm_profile;

    #[test]
    fn a_warm_profile_reads_its_tenant_count_and_credential_file() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("acme-key");
        std::fs::write(&key, "canary-warm-secret\n").unwrap();
        let profile = warm_profile(&format!(
            "tenant=acme, credential=CURSOR_API_KEY:{}, min_idle=2",
            key.display()
        ))
        .unwrap();
        assert_eq!((profile.tenant_id.as_str(), profile.min_idle), ("acme", 2));
        let credential = profile.credential.unwrap();
        assert_eq!(credential.name.as_str(), "CURSOR_API_KEY");
        assert_eq!(
            credential.secret.expose(),
            "canary-warm-secret",
            "the trailing newline is not part of it"
        );
        assert!(!format!("{credential:?}").contains("canary"), "never shown");
    }

    #[test]
    fn a_bad_warm_profile_is_refused_saying_why() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        for (spec, why) in [
            ("min_idle=1".to_owned(), "names no tenant"),
            ("tenant=acme,colour=blue".to_owned(), "unknown key"),
            ("tenant=acme,min_idle".to_owned(), "not key=value"),
            ("tenant=acme,min_idle=many".to_owned(), "min_idle"),
            ("tenant=acme,credential=CURSOR_API_KEY".to_owned(), "NAME:/path"),
            (
                "tenant=acme,credential=OPENAI_API_KEY:/x".to_owned(),
                "is not CURSOR_API_KEY",
            ),
            (
                "tenant=acme,credential=CURSOR_API_KEY:/nonexistent/key".to_owned(),
                "reading the credential file",
            ),
            (
                format!("tenant=acme,credential=CURSOR_AUTH_TOKEN:{}", empty.display()),
                "is empty",
            ),
        ] {
            let error = format!("{:#}", warm_profile(&spec).unwrap_err());
            assert!(error.contains(why), "{spec}: {error}");
        }
    }
}
