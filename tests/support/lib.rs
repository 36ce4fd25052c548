//! Test support for the end-to-end suite: a real service on a loopback port, a real
//! gRPC client, the fake agent as a real child process, and a throwaway database per
//! test (PostgreSQL or the embedded SQLite store).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cursor_runner_api::pb::admin_service_client::AdminServiceClient;
use cursor_runner_api::pb::runner_service_client::RunnerServiceClient;
use cursor_runner_api::pb::{self, stream_events_response::Frame};
use cursor_runner_executions::{Engine, EngineConfig};
use cursor_runner_pool::PoolConfig;
use cursor_runner_store::Store;
use cursor_runner_supervisor::AgentCommand;
use serde_json::Value;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

pub use cursor_runner_api::pb as proto;
pub use cursor_runner_executions::mcp::McpAllowlist;

pub mod client_anchors;
pub mod cpu_steal;
pub mod fleet_latency;
pub mod lease_latency;
pub mod mock_responses;
pub mod npm;
mod processes;
mod service_process;
pub mod throughput;
pub use processes::*;
pub mod acp_peers;
pub mod agent_users;
pub mod answer_latency;
pub mod pg_link;
pub mod pki;
pub mod private_postgres;
pub mod promtool;
pub mod stream_latency;
pub mod typescript;
pub mod verify_throughput;
pub use service_process::{
    ANY_PORT, ServiceDirs, ServiceProcess, ServiceSettings, fleet_replica_env, free_address, http_get, replica_env,
    scrape_metrics,
};

/// The server every Postgres test uses unless `DATABASE_URL` names another.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
/// Bound on any single wait in a test, so a broken service fails instead of hanging.
pub const WAIT: Duration = Duration::from_secs(20);
pub const TENANT: &str = "tenant-a";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// A database that exists for one test and is dropped after it.
pub struct TestDatabase {
    pub url: String,
    admin_url: Option<String>,
    name: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestDatabase {
    pub async fn create(backend: Backend) -> Self {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                Self {
                    url: format!("sqlite:{}", dir.path().join("test.db").display()),
                    admin_url: None,
                    name: String::new(),
                    _dir: Some(dir),
                }
            }
            Backend::Postgres => {
                let admin_url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned());
                let name = format!("cr_test_{}", uuid::Uuid::new_v4().simple());
                let mut admin = connect_admin(&admin_url).await;
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut admin)
                    .await
                    .expect("CREATE DATABASE");
                let base = admin_url.rsplit_once('/').map_or(admin_url.as_str(), |(base, _)| base);
                Self {
                    url: format!("{base}/{name}"),
                    admin_url: Some(admin_url),
                    name,
                    _dir: None,
                }
            }
        }
    }

    /// Makes the database unreachable (`true`: new connections refused, open ones
    /// terminated) or reachable again (Postgres only).
    pub async fn set_unreachable(&self, unreachable: bool) {
        let mut admin = self.admin().await;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER DATABASE {} ALLOW_CONNECTIONS {}",
            self.name, !unreachable
        )))
        .execute(&mut admin)
        .await
        .expect("ALTER DATABASE");
        if unreachable {
            self.terminate_connections(&mut admin).await;
        }
    }

    /// Makes the database read-only (`true`), as a fail-over that lands its clients on a
    /// standby does, or writable again; either way open connections are terminated, so
    /// new ones see the change (Postgres only).
    pub async fn set_read_only(&self, read_only: bool) {
        let mut admin = self.admin().await;
        let change = if read_only {
            "SET default_transaction_read_only = on"
        } else {
            "RESET default_transaction_read_only"
        };
        sqlx::query(sqlx::AssertSqlSafe(format!("ALTER DATABASE {} {change}", self.name)))
            .execute(&mut admin)
            .await
            .expect("ALTER DATABASE");
        self.terminate_connections(&mut admin).await;
    }

    /// Ends every session the service holds open to the database, as an operator's
    /// `pg_terminate_backend` or a pooler's recycling does; the database stays up (Postgres
    /// only).
    pub async fn end_sessions(&self) {
        let mut admin = self.admin().await;
        self.terminate_connections(&mut admin).await;
    }

    async fn admin(&self) -> sqlx::PgConnection {
        let admin_url = self
            .admin_url
            .as_ref()
            .expect("only a PostgreSQL database can be cut off");
        connect_admin(admin_url).await
    }

    async fn terminate_connections(&self, admin: &mut sqlx::PgConnection) {
        sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
            .bind(&self.name)
            .execute(admin)
            .await
            .expect("terminating the service's connections");
    }

    /// Everything the database holds, as text: `pg_dump --data-only` for PostgreSQL, the
    /// raw bytes of the SQLite file and its WAL (lossily decoded) otherwise. For tests that
    /// check a secret reached no row.
    pub fn dump(&self) -> String {
        match &self._dir {
            Some(dir) => ["test.db", "test.db-wal"]
                .iter()
                .map(|file| {
                    String::from_utf8_lossy(&std::fs::read(dir.path().join(file)).unwrap_or_default()).into_owned()
                })
                .collect(),
            None => {
                let out = std::process::Command::new("pg_dump")
                    .args(["--data-only", "--dbname", &self.url])
                    .output()
                    .expect("pg_dump");
                assert!(
                    out.status.success(),
                    "pg_dump: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                String::from_utf8_lossy(&out.stdout).into_owned()
            }
        }
    }

    /// Drops the database (Postgres); the SQLite file goes with its temp dir.
    pub async fn drop_database(self) {
        if let Some(admin_url) = &self.admin_url {
            let mut admin = connect_admin(admin_url).await;
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            )))
            .execute(&mut admin)
            .await;
        }
    }
}

async fn connect_admin(url: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    match sqlx::PgConnection::connect(url).await {
        Ok(c) => c,
        Err(e) => panic!(
            "PostgreSQL is not reachable at {url} ({e}). Start the local cluster with \
             `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`, \
             or set DATABASE_URL to a server you can create databases on."
        ),
    }
}

/// The fake agent binary, built next to the test binaries.
pub fn fake_agent() -> PathBuf {
    let (dir, _) = test_target_dir();
    let path = dir.join("fake-cursor");
    if !path.is_file() {
        build_workspace_binaries(&dir);
    }
    path
}

/// The `cursor-runner` binary, built next to the test binaries: its hidden `agent-init`
/// mode runs each agent as PID 1 of its own PID namespace. Rebuilt if it is missing or
/// older than this test binary, so a stale init is never tested.
pub fn agent_init() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let (dir, exe) = test_target_dir();
            let path = dir.join("cursor-runner");
            let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
            if modified(&path).is_none_or(|built| modified(&exe).is_some_and(|test| built < test)) {
                build_workspace_binaries(&dir);
                // The same cargo run that linked this test binary usually linked the
                // bin a moment earlier, so it stays "older" although it is fresh: mark
                // it checked, or every test process would ask cargo again.
                std::fs::File::open(&path)
                    .and_then(|bin| bin.set_modified(std::time::SystemTime::now()))
                    .expect("mark cursor-runner as checked");
            }
            path
        })
        .clone()
}

/// The directory holding the running test binary's profile output, and that binary.
fn test_target_dir() -> (PathBuf, PathBuf) {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir").to_path_buf();
    (dir, exe)
}

/// Variables cargo sets for one package's build or test run, by prefix.
const PACKAGE_SCOPED_CARGO_VARIABLES: &[&str] = &[
    "CARGO_MANIFEST_",
    "CARGO_PKG_",
    "CARGO_CRATE_",
    "CARGO_BIN_",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "CARGO_CFG_",
    "OUT_DIR",
];

/// Brings the workspace binaries in `dir` up to date with the build that produced the
/// tests. In a debug directory that is the test runner's own build (`cargo test
/// --no-run --workspace`, a no-op when nothing changed): building one package alone
/// resolves features differently, relinks several crates and makes the next test run
/// relink them back. A release directory belongs to a bench, which needs only the bins.
fn build_workspace_binaries(dir: &Path) {
    let args: &[&str] = if dir.ends_with("release") {
        &["build", "-q", "--release", "-p", "cursor-runner", "-p", "fake-cursor"]
    } else {
        &["test", "--no-run", "-q", "--workspace"]
    };
    // Cargo hands this test its package's variables (`CARGO_MANIFEST_DIR`,
    // `CARGO_PKG_NAME`, …); build scripts such as ring's watch those names, so a nested
    // cargo that kept them would rebuild half the graph and the next test run would
    // rebuild it back.
    let mut cargo = std::process::Command::new(env!("CARGO"));
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if PACKAGE_SCOPED_CARGO_VARIABLES
            .iter()
            .any(|prefix| name.starts_with(prefix))
        {
            cargo.env_remove(name.as_ref());
        }
    }
    let status = cargo
        .args(args)
        .current_dir(workspace_root())
        .status()
        .expect("run cargo to build the workspace binaries");
    assert!(
        status.success(),
        "building the workspace binaries failed: cargo {}",
        args.join(" ")
    );
}

/// `target/perf`, beside the profile directories: the benches' results and the anchors'
/// scratch installs.
pub fn perf_dir() -> PathBuf {
    let (dir, _) = test_target_dir();
    dir.parent().unwrap_or(&dir).join("perf")
}

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The argv of the fake agent playing `scenario_name`, for an agent profile.
pub fn fake_agent_argv(scenario_name: &str) -> Vec<String> {
    vec![
        fake_agent().display().to_string(),
        "--scenario".into(),
        scenario(scenario_name).display().to_string(),
    ]
}

pub fn scenario(name: &str) -> PathBuf {
    workspace_root().join("fixtures/scenarios").join(name)
}

pub type Client = RunnerServiceClient<InterceptedService<Channel, TenantHeader>>;
pub type AdminClient = AdminServiceClient<InterceptedService<Channel, TenantHeader>>;

/// Adds the caller's tenant to every request (or nothing, to test its absence).
#[derive(Clone)]
pub struct TenantHeader {
    tenant: Option<tonic::metadata::AsciiMetadataValue>,
    authorization: Option<tonic::metadata::AsciiMetadataValue>,
}

impl tonic::service::Interceptor for TenantHeader {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(tenant) = &self.tenant {
            request
                .metadata_mut()
                .insert(cursor_runner_api::TENANT_METADATA, tenant.clone());
        }
        if let Some(authorization) = &self.authorization {
            request.metadata_mut().insert("authorization", authorization.clone());
        }
        Ok(request)
    }
}

/// A client that sends a bearer token (and, to prove it is ignored, maybe a tenant header).
pub async fn connect_with_token(address: std::net::SocketAddr, token: Option<&str>, tenant: Option<&str>) -> Client {
    let channel = Channel::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .expect("connect");
    let header = TenantHeader {
        tenant: tenant.map(|t| tonic::metadata::MetadataValue::try_from(t).unwrap()),
        authorization: token.map(|t| tonic::metadata::MetadataValue::try_from(format!("Bearer {t}")).unwrap()),
    };
    RunnerServiceClient::with_interceptor(channel, header)
}

/// A client of the service at `address` whose calls carry `tenant` (or none).
pub async fn connect(address: std::net::SocketAddr, tenant: Option<&str>) -> Client {
    let channel = Channel::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .expect("connect");
    let tenant = tenant.map(|t| tonic::metadata::MetadataValue::try_from(t).unwrap());
    RunnerServiceClient::with_interceptor(
        channel,
        TenantHeader {
            tenant,
            authorization: None,
        },
    )
}

/// Knobs a test may turn before the service starts.
#[derive(Clone)]
pub struct Options {
    pub cancel_grace: Duration,
    pub stop_grace: Duration,
    pub heartbeat: Duration,
    /// Launch this instead of the fake agent with the named scenario.
    pub agent_command: Option<AgentCommand>,
    /// Run agents under `agent-init` in their own PID namespace (`false`: the fallbacks only).
    pub pid_namespace: bool,
    /// Serve with token authentication from this tokens file.
    pub tokens_file: Option<PathBuf>,
    pub pool: PoolConfig,
    pub drain_deadline: Duration,
    /// Bound on `initialize` and `session/new`.
    pub handshake_timeout: Duration,
    /// The runner-owned MCP servers executions may name.
    pub mcp_allowlist: McpAllowlist,
    /// Per-tenant ceilings on execution limits.
    pub tenant_limits: cursor_runner_executions::limits::TenantLimits,
    /// Pruning of acknowledged events.
    pub retention: Option<cursor_runner_executions::retention::Retention>,
    /// Pruning of completed idempotency keys (`None`: the engine's default).
    pub idempotency_retention: Option<cursor_runner_executions::retention::Retention>,
    /// Capture every execution's raw wire traffic here.
    pub wire_capture_dir: Option<PathBuf>,
    /// Run agents under their own provisioned uids (when the tests run as root).
    pub agent_uid_separation: bool,
    /// What refused configuration appearing mid-session does.
    pub on_workspace_violation: cursor_runner_executions::ViolationAction,
    /// The turn deadline of executions that name none (`None`: the engine's default).
    pub default_turn_deadline: Option<Duration>,
    /// The idle-output watchdog (`None`: the engine's default).
    pub turn_idle_timeout: Option<Duration>,
    /// Where the host's enterprise hooks file is looked for (`None`: the real one).
    pub enterprise_hooks: Option<PathBuf>,
    /// Serve with these agent profiles (`serve --agent-profiles`).
    pub agent_profiles: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            cancel_grace: Duration::from_secs(10),
            stop_grace: Duration::from_secs(2),
            heartbeat: Duration::from_secs(15),
            agent_command: None,
            tokens_file: None,
            pid_namespace: true,
            pool: PoolConfig::default(),
            drain_deadline: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(60),
            mcp_allowlist: McpAllowlist::default(),
            tenant_limits: Default::default(),
            retention: None,
            idempotency_retention: None,
            wire_capture_dir: None,
            agent_uid_separation: true,
            on_workspace_violation: Default::default(),
            enterprise_hooks: None,
            default_turn_deadline: None,
            turn_idle_timeout: None,
            agent_profiles: None,
        }
    }
}

/// A running service with its own database, state dir and fake agent scenario.
pub struct TestService {
    pub address: std::net::SocketAddr,
    pub engine: Arc<Engine>,
    pub store: Arc<dyn Store>,
    pub workspace: PathBuf,
    /// Every line the fake agent read from its stdin, across all its processes.
    pub record: PathBuf,
    database: Option<TestDatabase>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
    _state: tempfile::TempDir,
}

impl TestService {
    pub async fn start(backend: Backend, scenario_name: &str) -> Self {
        Self::start_with(backend, scenario_name, Options::default()).await
    }

    pub async fn start_with(backend: Backend, scenario_name: &str, options: Options) -> Self {
        if let Ok(filter) = std::env::var("CURSOR_RUNNER_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_test_writer()
                .try_init();
        }
        let database = TestDatabase::create(backend).await;
        let state = tempfile::tempdir().expect("state dir");
        let workspace = state.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        let record = state.path().join("agent-stdin.ndjson");
        let users = if options.agent_uid_separation {
            agent_users::agent_users()
        } else {
            None
        };
        if users.is_some() {
            agent_users::traversable(state.path());
            agent_users::shared_with_agents(&workspace);
            agent_users::appendable_by_agents(&record);
        }
        let command = options.agent_command.clone().unwrap_or_else(|| {
            AgentCommand::parse(&format!(
                "{} --scenario {} --record {}",
                fake_agent().display(),
                scenario(scenario_name).display(),
                record.display()
            ))
            .unwrap()
        });
        let store = cursor_runner_store::connect(&database.url).await.expect("store");
        let mut config = EngineConfig::new(command, state.path().to_path_buf());
        config.cancel_grace = options.cancel_grace;
        config.stop_grace = options.stop_grace;
        config.heartbeat_interval = options.heartbeat;
        config.agent_init = Some(agent_init());
        config.pid_namespace = options.pid_namespace;
        config.pool = options.pool.clone();
        config.drain_deadline = options.drain_deadline;
        config.handshake_timeout = options.handshake_timeout;
        config.mcp_allowlist = options.mcp_allowlist.clone();
        config.tenant_limits = options.tenant_limits.clone();
        config.retention = options.retention;
        if let Some(retention) = options.idempotency_retention {
            config.idempotency_retention = Some(retention);
        }
        config.wire_capture_dir = options.wire_capture_dir.clone();
        config.agent_users = users;
        config.on_workspace_violation = options.on_workspace_violation;
        if let Some(deadline) = options.default_turn_deadline {
            config.default_turn_deadline = Some(deadline);
        }
        if let Some(idle) = options.turn_idle_timeout {
            config.turn_idle_timeout = Some(idle);
        }
        if let Some(path) = &options.agent_profiles {
            config.agent_profiles = Some(Arc::new(
                cursor_runner_pool::agent_profile::AgentProfiles::from_file(path).expect("agent profiles"),
            ));
        }
        if let Some(hooks) = &options.enterprise_hooks {
            config.workspace_policy.enterprise_hooks = hooks.clone();
        }
        let engine = Engine::start(store.clone(), config).await.expect("engine");
        let listener = cursor_runner_api::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server_engine = engine.clone();
        let auth = options
            .tokens_file
            .as_ref()
            .map(|path| Arc::new(cursor_runner_api::TokenAuth::from_file(path).expect("tokens file")));
        let server = tokio::spawn(async move {
            cursor_runner_api::serve_with(
                server_engine,
                listener,
                async {
                    let _ = stopped.await;
                },
                cursor_runner_api::ServeOptions {
                    auth,
                    tls: None,
                    forwarder: None,
                },
            )
            .await
            .expect("server");
        });
        Self {
            address,
            engine,
            store,
            workspace,
            record,
            database: Some(database),
            stop: Some(stop),
            server: Some(server),
            _state: state,
        }
    }

    pub async fn client(&self) -> Client {
        self.client_for(Some(TENANT)).await
    }

    /// The service's database.
    pub fn database(&self) -> &TestDatabase {
        self.database
            .as_ref()
            .expect("the database lives as long as the service")
    }

    /// A scrape of the engine's metrics: the exact text `/metrics` serves.
    pub fn metrics(&self) -> String {
        self.engine.metrics().encode()
    }

    /// The service's state directory (private homes, the launch ledger).
    pub fn state_dir(&self) -> &Path {
        self._state.path()
    }

    /// An `AdminService` client, with a bearer token when given.
    pub async fn admin(&self, token: Option<&str>) -> AdminClient {
        AdminServiceClient::with_interceptor(
            self.channel().await,
            TenantHeader {
                tenant: None,
                authorization: token.map(|t| tonic::metadata::MetadataValue::try_from(format!("Bearer {t}")).unwrap()),
            },
        )
    }

    /// A client whose calls carry `tenant` (or no tenant at all).
    pub async fn client_for(&self, tenant: Option<&str>) -> Client {
        connect(self.address, tenant).await
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.address))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    /// Lines the fake agent read from stdin, parsed.
    pub fn agent_received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("the service writes JSON lines"))
            .collect()
    }

    /// Stops the server, closes every execution, and drops the database.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            tracing::debug!("waiting for the server to stop");
            let _ = server.await;
        }
        tracing::debug!("closing every execution");
        self.engine.shutdown().await;
        tracing::debug!("closed");
        if let Some(database) = self.database.take() {
            database.drop_database().await;
        }
    }
}

pub async fn create_execution(client: &mut Client, service: &TestService, request_id: &str) -> pb::Execution {
    create_execution_in(client, &service.workspace, request_id).await
}

/// An execution in `workspace` with its first turn started, and its stream from the start.
/// `tag` keeps request ids apart on a shared database.
pub async fn turn_started(client: &mut Client, workspace: &Path, tag: &str) -> (pb::Execution, Subscriber) {
    let execution = create_execution_in(client, workspace, &format!("create-{tag}")).await;
    let events = Subscriber::open(client, &execution.execution_id, 0)
        .await
        .expect("StreamEvents");
    start_turn(client, &execution.execution_id, &format!("turn-{tag}"))
        .await
        .expect("StartTurn");
    (execution, events)
}

/// [`turn_started`], once the turn has asked a question (as `demo.json`'s does): the
/// execution, its stream up to the question, and the question's `runtime_request.created`
/// payload.
pub async fn question_asked(client: &mut Client, workspace: &Path, tag: &str) -> (pb::Execution, Subscriber, Value) {
    let (execution, mut events) = turn_started(client, workspace, tag).await;
    let created = payload(
        events
            .events_until("runtime_request.created")
            .await
            .last()
            .expect("a question"),
    );
    (execution, events, created)
}

/// [`create_execution`] for any service (e.g. a [`ServiceProcess`]) and workspace.
pub async fn create_execution_in(client: &mut Client, workspace: &Path, request_id: &str) -> pb::Execution {
    client
        .create_execution(pb::CreateExecutionRequest {
            request_id: request_id.into(),
            workspace: workspace.display().to_string(),
            ..Default::default()
        })
        .await
        .expect("CreateExecution")
        .into_inner()
        .execution
        .expect("execution")
}

pub async fn start_turn(client: &mut Client, execution_id: &str, request_id: &str) -> Result<pb::Turn, tonic::Status> {
    client
        .start_turn(pb::StartTurnRequest {
            request_id: request_id.into(),
            execution_id: execution_id.into(),
            prompt: vec![pb::PromptBlock {
                content: Some(pb::prompt_block::Content::Text("do the work".into())),
            }],
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().turn.expect("turn"))
}

/// The first page of an execution's turns.
pub async fn list_turns(client: &mut Client, execution_id: &str) -> pb::ListTurnsResponse {
    client
        .list_turns(pb::ListTurnsRequest {
            execution_id: execution_id.into(),
            ..Default::default()
        })
        .await
        .expect("ListTurns")
        .into_inner()
}

/// Creates an execution, subscribes to its events from the start, and starts its first turn.
pub async fn begin_turn(client: &mut Client, service: &TestService) -> (pb::Execution, pb::Turn, Subscriber) {
    begin_turn_with(client, service, pb::CreateExecutionRequest::default()).await
}

/// [`begin_turn`] with chosen execution settings (the request id and workspace are filled in).
pub async fn begin_turn_with(
    client: &mut Client,
    service: &TestService,
    settings: pb::CreateExecutionRequest,
) -> (pb::Execution, pb::Turn, Subscriber) {
    begin_turn_at(client, &service.workspace, settings).await
}

/// [`begin_turn_with`] for any service (e.g. a [`ServiceProcess`]) and workspace.
pub async fn begin_turn_at(
    client: &mut Client,
    workspace: &Path,
    mut settings: pb::CreateExecutionRequest,
) -> (pb::Execution, pb::Turn, Subscriber) {
    settings.request_id = "create-1".into();
    settings.workspace = workspace.display().to_string();
    let execution = client
        .create_execution(settings)
        .await
        .expect("CreateExecution")
        .into_inner()
        .execution
        .expect("execution");
    let events = Subscriber::open(client, &execution.execution_id, 0)
        .await
        .expect("StreamEvents");
    let turn = start_turn(client, &execution.execution_id, "turn-1")
        .await
        .expect("StartTurn");
    (execution, turn, events)
}

/// Answers a permission (its `runtime_request.created` payload) with the option it offers
/// as `allow_once`; the interaction as `AnswerInteraction` returned it.
pub async fn allow_once(client: &mut Client, created: &Value, request_id: &str) -> pb::Interaction {
    let allow = created["request"]["options"]
        .as_array()
        .expect("the permission's options")
        .iter()
        .find(|o| o["kind"] == "allow_once")
        .expect("an allow_once option")["optionId"]
        .as_str()
        .expect("an option id")
        .to_owned();
    client
        .answer_interaction(pb::AnswerInteractionRequest {
            request_id: request_id.into(),
            interaction_id: created["interactionId"].as_str().expect("interactionId").into(),
            etag: created["etag"].as_str().expect("etag").into(),
            answer: Some(pb::answer_interaction_request::Answer::Permission(
                pb::PermissionAnswer { option_id: allow },
            )),
        })
        .await
        .expect("answered")
        .into_inner()
        .interaction
        .expect("the interaction")
}

/// An answer picking `option_id` for the one question of the interaction that
/// `created` (a `runtime_request.created` payload) exposed, echoing its etag.
pub fn one_question_answer(created: &Value, request_id: &str, option_id: &str) -> pb::AnswerInteractionRequest {
    pb::AnswerInteractionRequest {
        request_id: request_id.into(),
        interaction_id: created["interactionId"].as_str().expect("interactionId").into(),
        etag: created["etag"].as_str().expect("etag").into(),
        answer: Some(pb::answer_interaction_request::Answer::Questions(pb::QuestionAnswer {
            selections: vec![pb::QuestionSelection {
                question_id: "question-1".into(),
                option_ids: vec![option_id.into()],
            }],
        })),
    }
}

pub async fn get_execution(client: &mut Client, execution_id: &str) -> pb::Execution {
    client
        .get_execution(pb::GetExecutionRequest {
            execution_id: execution_id.into(),
        })
        .await
        .expect("GetExecution")
        .into_inner()
        .execution
        .expect("execution")
}

/// Polls `GetExecution` until the execution is in `state` (or `WAIT` runs out).
pub async fn execution_in_state(client: &mut Client, execution_id: &str, state: pb::ExecutionState) -> pb::Execution {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let record = get_execution(client, execution_id).await;
        if record.state == state as i32 {
            return record;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "execution {execution_id} never reached {state:?} (state {})",
            record.state
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn get_interaction(client: &mut Client, interaction_id: &str) -> pb::Interaction {
    client
        .get_interaction(pb::GetInteractionRequest {
            interaction_id: interaction_id.into(),
        })
        .await
        .expect("GetInteraction")
        .into_inner()
        .interaction
        .expect("interaction")
}

pub async fn cancel_turn(client: &mut Client, execution_id: &str, turn_id: &str) -> pb::Turn {
    client
        .cancel_turn(pb::CancelTurnRequest {
            request_id: format!("cancel-{turn_id}"),
            execution_id: execution_id.into(),
            turn_id: turn_id.into(),
        })
        .await
        .expect("CancelTurn")
        .into_inner()
        .turn
        .expect("turn")
}

/// The agent's whole environment, by name, as the launcher builds it from nothing:
/// written out here, not taken from the code's own list. `CURSOR_RUNNER_LAUNCH` is the
/// launch marker (random, no secret) by which the guardian finds descendants.
pub const CLOSED_AGENT_ENVIRONMENT: [&str; 11] = [
    "AGENT_CLI_CREDENTIAL_STORE",
    "CURSOR_CONFIG_DIR",
    "CURSOR_DATA_DIR",
    "CURSOR_RUNNER_LAUNCH",
    "HOME",
    "NODE_DISABLE_COMPILE_CACHE",
    "NO_OPEN_BROWSER",
    "PATH",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
];

/// A subscriber that collects frames.
pub struct Subscriber {
    stream: tonic::Streaming<pb::StreamEventsResponse>,
}

impl Subscriber {
    pub async fn open(client: &mut Client, execution_id: &str, after_sequence: i64) -> Result<Self, tonic::Status> {
        let stream = client
            .stream_events(pb::StreamEventsRequest {
                execution_id: execution_id.into(),
                after_sequence,
            })
            .await?
            .into_inner();
        Ok(Self { stream })
    }

    pub async fn next_frame(&mut self) -> Frame {
        tokio::time::timeout(WAIT, self.stream.message())
            .await
            .expect("a frame in time")
            .expect("stream ok")
            .expect("stream open")
            .frame
            .expect("frame set")
    }

    /// The next event within `WAIT` (heartbeats and caught-up frames do not extend it).
    pub async fn next_event(&mut self) -> pb::ActivityEvent {
        let next = async {
            loop {
                if let Frame::Event(event) = self.next_frame().await {
                    return event;
                }
            }
        };
        tokio::time::timeout(WAIT, next).await.expect("an event in time")
    }

    /// Events up to and including the first whose type is `event_type`.
    pub async fn events_until(&mut self, event_type: &str) -> Vec<pb::ActivityEvent> {
        let mut out = Vec::new();
        loop {
            let event = self.next_event().await;
            let done = event.event_type == event_type;
            out.push(event);
            if done {
                return out;
            }
        }
    }

    /// Every event before the stream's `caught_up` frame: all it had stored when opened.
    pub async fn until_caught_up(&mut self) -> Vec<pb::ActivityEvent> {
        let mut out = Vec::new();
        loop {
            match self.next_frame().await {
                Frame::Event(event) => out.push(event),
                Frame::CaughtUp(_) => return out,
                Frame::Heartbeat(_) => {}
            }
        }
    }

    /// Events up to and including the first turn settlement.
    pub async fn until_turn_settles(&mut self) -> Vec<pb::ActivityEvent> {
        let mut out = Vec::new();
        loop {
            let event = self.next_event().await;
            let done = is_settlement(&event.event_type);
            out.push(event);
            if done {
                return out;
            }
        }
    }
}

pub fn is_settlement(event_type: &str) -> bool {
    matches!(
        event_type,
        "turn.completed" | "turn.failed" | "turn.cancelled" | "turn.interrupted"
    )
}

pub fn payload(event: &pb::ActivityEvent) -> Value {
    event
        .payload
        .as_ref()
        .map(cursor_runner_api::struct_to_json)
        .unwrap_or_default()
}

pub fn types(events: &[pb::ActivityEvent]) -> Vec<&str> {
    events.iter().map(|e| e.event_type.as_str()).collect()
}

/// The `RetryInfo.retry_delay` of a status, if it says when to retry.
pub fn retry_delay(status: &tonic::Status) -> Option<Duration> {
    use tonic_types::StatusExt;
    status.get_details_retry_info().and_then(|info| info.retry_delay)
}

/// The `ErrorInfo.reason` of a status.
/// `call` until it returns anything but a status whose code is in `retryable` (each a
/// refusal the service says to retry), for at most `patience`; `what` names it in a failure.
pub async fn retrying_while<T, F, Fut>(
    retryable: &[tonic::Code],
    patience: std::time::Duration,
    what: &str,
    mut call: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let give_up = tokio::time::Instant::now() + patience;
    loop {
        match call().await {
            Ok(value) => return value,
            Err(status) if retryable.contains(&status.code()) => {
                assert!(
                    tokio::time::Instant::now() < give_up,
                    "{what}: still refused after {patience:?}: {status:?}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(status) => panic!("{what}: {status:?}"),
        }
    }
}

pub fn reason(status: &tonic::Status) -> String {
    use tonic_types::StatusExt;
    status
        .get_error_details()
        .error_info()
        .map(|i| i.reason.clone())
        .unwrap_or_default()
}

/// One `ErrorInfo.metadata` value of a status.
pub fn error_metadata(status: &tonic::Status, key: &str) -> Option<String> {
    use tonic_types::StatusExt;
    status.get_error_details().error_info()?.metadata.get(key).cloned()
}

/// Asserts a status code and `ErrorInfo.reason`.
#[track_caller]
pub fn assert_refused(result: Result<impl std::fmt::Debug, tonic::Status>, code: tonic::Code, expected_reason: &str) {
    let status = result.expect_err("the call must be refused");
    assert_eq!(status.code(), code, "{status:?}");
    assert_eq!(reason(&status), expected_reason, "{status:?}");
}

/// Asserts an agent's refusal to start without authentication: `AUTH_REQUIRED`, naming the
/// agent's own methods (comma-separated, as `ErrorInfo.metadata["auth_methods"]` carries
/// them) and, when given, in the agent's own words.
#[track_caller]
pub fn assert_auth_required(refused: &tonic::Status, methods: &str, words: Option<&str>) {
    assert_eq!(
        (refused.code(), reason(refused).as_str()),
        (tonic::Code::FailedPrecondition, "AUTH_REQUIRED"),
        "{}",
        refused.message()
    );
    assert_eq!(error_metadata(refused, "auth_methods").as_deref(), Some(methods));
    if let Some(words) = words {
        assert!(
            refused.message().contains(words),
            "the agent's words: {}",
            refused.message()
        );
    }
}

/// True while `pid` names a live (non-zombie) process.
pub fn process_alive(pid: i64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
    }
}

/// Polls `check` until it holds or `WAIT` runs out.
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until health reports `expected` for the runner service.
pub async fn health_becomes(
    health: &mut tonic_health::pb::health_client::HealthClient<Channel>,
    expected: tonic_health::pb::health_check_response::ServingStatus,
) {
    // The store is pinged every STORE_PROBE_INTERVAL, each ping bounded by STORE_PROBE_TIMEOUT.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let now = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: cursor_runner_api::RUNNER_SERVICE_NAME.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status();
        if now == expected {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still {now:?}, expected {expected:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
