//! The engine: admission, idempotency, routing commands to execution actors, and
//! event streams. Everything the gRPC layer calls.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cursor_runner_activity::{ActivityPayload, RuntimeRequestEnded, TurnFailureReason, TurnSettled};
use cursor_runner_store::{
    EventRecord, ExecutionRecord, IdempotencyClaim, IdempotencyKey, InteractionQuery, InteractionRecord, Patience,
    Store, StoreError, TurnRecord, now_ms,
};
use cursor_runner_supervisor::agent_callers::{AgentCaller, AgentCallers};
use cursor_runner_supervisor::{BoundCredential, Guardian, GuardianConfig};

use crate::credential::{CredentialBinding, redactor_for};
use cursor_runner_activity::Redactor;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument;

use crate::actor::{self, Command, ConfigChange};
use crate::agent_profile::ResolvedProfile;
use crate::attempts::UsageTotal;
use crate::config::EngineConfig;
use crate::error::policy_refusal;
use crate::error::{EngineError, ErrorKind, Reason};
use crate::events::EventWriter;
use crate::execution_row;
use crate::handshake::SessionStart;
use crate::interaction::{self, ApprovalPolicy, InteractionAnswer};
use crate::interaction::{kind_of, not_pending};
use crate::lease::{LeaseInfo, micros};
use crate::limits::ExecutionLimits;
use crate::mcp::McpServer;
use crate::metrics::Metrics;
use crate::model_catalog::ModelCatalog;
use crate::pool::{LaunchAs, MAX_LEASE_WAIT, Pool, PoolStatus, Reservation};
use crate::prompt::Prompt;
use crate::retention::{self};
use crate::session_config::{ConfigRequest, SessionConfig};
use crate::state::{ExecutionState, InteractionState, TurnState};
use cursor_runner_supervisor::isolation::AgentIsolation;

pub type ExecutionView = ExecutionRecord;

/// Events read from the store per page while replaying.
const REPLAY_PAGE: i64 = 512;
/// Largest page a list call returns.
pub const MAX_PAGE_SIZE: i64 = 500;
/// Page size when the caller names none.
pub const DEFAULT_PAGE_SIZE: i64 = 50;
/// Stream items buffered per subscriber before the reader waits for it.
const SUBSCRIBER_BUFFER: usize = 256;
/// How often a stream whose execution has no live writer looks for a new one (a
/// recovery) and re-reads the store.
const WRITER_POLL: Duration = Duration::from_secs(1);

/// The agent profile a recorded execution's process ran under (its lease says).
fn recorded_agent_profile(record: &ExecutionRecord) -> Option<String> {
    record
        .lease
        .as_deref()
        .and_then(LeaseInfo::from_json)
        .and_then(|l| l.agent_profile)
}

/// Identity of a mutating call.
#[derive(Debug, Clone)]
pub struct RequestMeta {
    pub tenant_id: String,
    pub request_id: String,
    /// Digest of the request body without its `request_id`.
    pub request_digest: String,
}

#[derive(Debug, Clone)]
pub struct CreateExecutionCommand {
    pub workspace: String,
    pub approval_policy: ApprovalPolicy,
    /// How long a question or plan may wait for a human; `None` means the default.
    pub interaction_wait_limit: Option<Duration>,
    /// The control plane's session (run) this execution serves.
    pub control_session_id: String,
    pub credential: Option<CredentialBinding>,
    /// How long to wait for a process when the pool is at its limits (`None`: refuse at once).
    pub lease_wait: Option<Duration>,
    /// The exact model, its parameters and the mode, applied and echo-checked before
    /// any prompt. Empty: the agent's own current choice, recorded as reported.
    pub session: ConfigRequest,
    /// Load this recorded session (`session/load`) instead of opening a new one.
    pub load_session_id: Option<String>,
    /// Runner-owned MCP servers (allowlist names) injected into `session/new`.
    pub mcp_servers: Vec<String>,
    /// Bounds before spend, capped by the tenant's policy.
    pub limits: ExecutionLimits,
    /// The operator's agent profile to launch under (`None`: `--agent-command`).
    pub agent_profile: Option<String>,
}

/// What an admitted `CreateExecution` launches with.
struct Admitted {
    workspace: PathBuf,
    policy: ApprovalPolicy,
    wait_limit: Duration,
    credential: Option<BoundCredential>,
    lease_wait: Duration,
    session: ConfigRequest,
    load_session_id: Option<String>,
    mcp_servers: Vec<McpServer>,
    limits: ExecutionLimits,
    agent: Option<ResolvedProfile>,
}

/// A leased process's first steps for an execution.
struct Binding {
    /// When the pool reservation began: the lease is timed from here.
    admitted: Instant,
    /// The secrets handed to the agent, kept out of its events.
    redactor: Redactor,
    reservation: Reservation,
    session: ConfigRequest,
    start: SessionStart,
    mcp_servers: Vec<McpServer>,
}

/// How long a question or plan waits for a human unless the execution says otherwise.
pub const DEFAULT_INTERACTION_WAIT_LIMIT: Duration = Duration::from_secs(30 * 60);
/// The longest wait limit an execution may ask for.
pub const MAX_INTERACTION_WAIT_LIMIT: Duration = Duration::from_secs(7 * 24 * 60 * 60);

#[derive(Debug, Clone)]
pub struct AnswerCommand {
    pub interaction_id: String,
    pub etag: String,
    pub answer: InteractionAnswer,
}

/// One item of an event stream.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    Event(EventRecord),
    /// Replay reached the live head; live events follow.
    CaughtUp {
        head_sequence: i64,
    },
    Heartbeat {
        head_sequence: i64,
    },
}

struct ExecutionHandle {
    tenant_id: String,
    commands: mpsc::Sender<(Command, tracing::Span)>,
    head: watch::Receiver<i64>,
    /// The secrets kept out of what the actor's errors say.
    redactor: Redactor,
}

/// How often the outbox lag (head − acknowledged) of every live execution is sampled.
pub const OUTBOX_LAG_SAMPLE_INTERVAL: Duration = Duration::from_secs(15);

type InFlight = watch::Receiver<Option<Result<Value, EngineError>>>;

pub struct Engine {
    store: Arc<dyn Store>,
    config: Arc<EngineConfig>,
    executions: Arc<Mutex<HashMap<String, ExecutionHandle>>>,
    in_flight: Mutex<HashMap<IdempotencyKey, (String, InFlight)>>,
    /// Flips to true when the service starts shutting down: open streams end.
    closing_streams: watch::Sender<bool>,
    /// Flips to true when a drain begins: health says NOT_SERVING, no new work.
    draining: watch::Sender<bool>,
    /// Flips to true when the drain has closed every execution.
    drained: watch::Sender<bool>,
    metrics: Arc<Metrics>,
    pool: Pool,
    /// Background tasks (retention sweep, lag sampler), stopped at shutdown.
    background: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Engine {
    /// Starts the engine and settles what a previous incarnation left live: its agents
    /// are gone, so their turns fail and their pending interactions expire (never replayed).
    pub async fn start(store: Arc<dyn Store>, mut config: EngineConfig) -> Result<Arc<Self>, EngineError> {
        // Before anything that acts on what a previous incarnation left (its processes,
        // its live executions, its calls): those must not be another live replica's.
        claim_sole_service(store.as_ref()).await?;
        // Sweeps what a SIGKILLed previous incarnation left running, before anything launches.
        config.guardian = Some(Guardian::start(GuardianConfig {
            state_dir: config.state_dir.clone(),
            agent_init: config.agent_init.clone(),
            pid_namespace: config.pid_namespace,
        }));
        let config = Arc::new(config);
        let metrics = Arc::new(Metrics::new());
        let pool = Pool::start(config.pool.clone(), config.launch_settings(), metrics.clone());
        let engine = Arc::new(Self {
            store,
            config,
            executions: Arc::new(Mutex::new(HashMap::new())),
            in_flight: Mutex::new(HashMap::new()),
            closing_streams: watch::Sender::new(false),
            draining: watch::Sender::new(false),
            drained: watch::Sender::new(false),
            metrics,
            pool,
            background: Mutex::new(Vec::new()),
        });
        engine.store.observe_with(engine.metrics.clone());
        engine.recover_after_restart().await?;
        engine.complete_abandoned_calls().await?;
        let mut background = vec![tokio::spawn(sample_outbox_lag(Arc::downgrade(&engine)))];
        if let Some(retention) = engine.config.retention {
            background.push(retention::start(
                engine.store.clone(),
                retention,
                engine.metrics.clone(),
            ));
        }
        if let Some(retention) = engine.config.idempotency_retention {
            background.push(retention::start_idempotency(engine.store.clone(), retention));
        }
        *lock(&engine.background) = background;
        Ok(engine)
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// This engine's metrics (served by the runner on its metrics port).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Whether a drain or shutdown has begun; health reports NOT_SERVING then.
    pub fn draining(&self) -> watch::Receiver<bool> {
        self.draining.subscribe()
    }

    /// Whether a drain has closed every execution (the service may exit).
    pub fn drained(&self) -> watch::Receiver<bool> {
        self.drained.subscribe()
    }

    /// The pool, per profile (admin).
    pub fn pool_status(&self) -> PoolStatus {
        self.pool.status()
    }

    /// Ends a profile's quarantine (admin).
    pub fn clear_quarantine(&self, profile_id: &str) -> Result<(), EngineError> {
        if self.pool.clear_quarantine(profile_id) {
            Ok(())
        } else {
            Err(EngineError::not_found(
                Reason::ProfileNotFound,
                format!("no pool profile `{profile_id}`"),
            ))
        }
    }

    /// Starts draining (idempotent; a later call may only bring the deadline forward):
    /// no new executions or turns, idle slots stopped, running turns finish until the
    /// deadline and are then cancelled (interactions settle by their rules), then every
    /// execution is closed through the stop ladder and [`Engine::drained`] flips.
    /// Returns the deadline in effect.
    pub fn begin_drain(self: &Arc<Self>, deadline: Option<Duration>) -> Duration {
        let deadline = deadline.unwrap_or(self.config.drain_deadline);
        let first = !self.draining.send_replace(true);
        self.metrics.draining();
        self.pool.drain();
        let until = tokio::time::Instant::now() + deadline;
        let handles: Vec<mpsc::Sender<(Command, tracing::Span)>> =
            lock(&self.executions).values().map(|h| h.commands.clone()).collect();
        let engine = self.clone();
        tokio::spawn(async move {
            let mut replies = Vec::new();
            for commands in handles {
                let (reply, rx) = oneshot::channel();
                if commands
                    .send((Command::Drain { deadline: until, reply }, tracing::Span::current()))
                    .await
                    .is_ok()
                {
                    replies.push(rx);
                }
            }
            for rx in replies {
                let _ = rx.await;
            }
            if first {
                engine.pool.stopped(engine.config.stop_grace * 2).await;
                engine.drained.send_replace(true);
                tracing::info!("drained: every execution is closed");
            }
        });
        deadline
    }

    /// The store as an execution's actor writes to it: riding out an outage up to
    /// `store_outage_limit` (RPCs use the impatient one and fail fast).
    fn execution_store(&self) -> Arc<dyn Store> {
        self.store.with_patience(Patience::For(self.config.store_outage_limit))
    }

    /// The agent behind a connection to the service's API from `peer` (accepted on
    /// `local`), if one of this host's agents holds it: agents never call the API
    /// (`supervisor::agent_callers`). Reads `/proc`: call it off the async workers.
    pub fn agent_behind(&self, peer: std::net::SocketAddr, local: std::net::SocketAddr) -> Option<AgentCaller> {
        let callers = match &self.config.agent_users {
            Some(users) => AgentCallers::Uids(users.uids()),
            None => AgentCallers::LaunchMarker,
        };
        callers.agent_behind(peer, local)
    }

    /// A cheap round trip to the store, for health.
    pub async fn store_reachable(&self) -> bool {
        self.store.get_execution("", "").await.is_ok()
    }

    /// Why the service cannot serve new work right now for want of its store: it does
    /// not answer a cheap round trip within `timeout`.
    pub async fn store_problem(&self, timeout: Duration) -> Option<String> {
        let reachable = tokio::time::timeout(timeout, self.store_reachable())
            .await
            .unwrap_or(false);
        self.metrics.store_reachable(reachable);
        (!reachable).then(|| "the store does not answer".into())
    }

    /// What separates the agents this engine launches from the service, each other and
    /// the host, as in force now.
    pub fn agent_isolation(&self) -> AgentIsolation {
        let guardian = self
            .config
            .guardian
            .as_ref()
            .expect("Engine::start sets the guardian")
            .report();
        AgentIsolation::of_this_process(self.config.agent_users.is_some(), guardian)
    }

    /// Why the service cannot serve new work right now besides its store, if it cannot:
    /// the pinned distribution no longer verifies (quick check), or every known pool
    /// profile is quarantined. Draining is reported apart.
    pub async fn readiness_problem(&self) -> Option<String> {
        if let Some(pinned) = self.config.agent_command.distribution.clone() {
            let verified = tokio::task::spawn_blocking(move || {
                cursor_runner_supervisor::distribution::verify(
                    &pinned.closure_dir,
                    &pinned.pin,
                    cursor_runner_supervisor::distribution::VerifyMode::Quick,
                )
                .map(drop)
                .map_err(|e| e.to_string())
            })
            .await;
            match verified {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Some(format!("the pinned distribution does not verify: {e}")),
                Err(e) => return Some(format!("verifying the distribution failed: {e}")),
            }
        }
        let pool = self.pool.status();
        let quarantined = |p: &crate::pool::ProfileStatus| p.quarantine_remaining.is_some_and(|left| !left.is_zero());
        if !pool.profiles.is_empty() && pool.profiles.iter().all(quarantined) {
            return Some("every pool profile is quarantined".into());
        }
        None
    }

    pub async fn create_execution(
        self: &Arc<Self>,
        meta: RequestMeta,
        command: CreateExecutionCommand,
    ) -> Result<ExecutionRecord, EngineError> {
        let admitted = self
            .admit(command)
            .inspect_err(|e| self.metrics.launch_refused(e.reason))?;
        if *self.draining.borrow() {
            return Err(EngineError::new(
                ErrorKind::Unavailable,
                Reason::Draining,
                "the service is draining: it takes no new executions",
            ));
        }
        let engine = self.clone();
        let tenant_id = meta.tenant_id.clone();
        let caller = tenant_id.clone();
        let result = self
            .idempotent(meta, "CreateExecution", move || async move {
                let record = engine.launch_execution(&tenant_id, admitted).await?;
                Ok(json!({"executionId": record.id}))
            })
            .await?;
        self.execution_from_result(&caller, &result).await
    }

    /// Checks a `CreateExecution` before anything is claimed or launched.
    fn admit(&self, command: CreateExecutionCommand) -> Result<Admitted, EngineError> {
        let workspace = validate_workspace(&command.workspace)?;
        command.session.validate()?;
        command.limits.validate()?;
        let mcp_servers = self.config.mcp_allowlist.select(&command.mcp_servers)?;
        self.config.workspace_policy.check(&workspace).map_err(policy_refusal)?;
        let wait_limit = match command.interaction_wait_limit {
            None => DEFAULT_INTERACTION_WAIT_LIMIT,
            Some(limit) if limit.is_zero() || limit > MAX_INTERACTION_WAIT_LIMIT => {
                return Err(EngineError::invalid(
                    Reason::InvalidArgument,
                    "interaction_wait_limit must be positive and at most 7 days",
                ));
            }
            Some(limit) => limit,
        };
        let lease_wait = match command.lease_wait {
            Some(wait) if wait > MAX_LEASE_WAIT => {
                return Err(EngineError::invalid(
                    Reason::InvalidArgument,
                    format!("lease_wait must be at most {MAX_LEASE_WAIT:?}"),
                ));
            }
            wait => wait.unwrap_or_default(),
        };
        let agent = self.agent_profile(command.agent_profile.as_deref())?;
        let credential = command
            .credential
            .map(|binding| {
                binding.admit(
                    &command.control_session_id,
                    now_ms(),
                    agent.as_ref().map(|a| a.profile.as_ref()),
                )
            })
            .transpose()?;
        Ok(Admitted {
            agent,
            workspace,
            policy: command.approval_policy,
            wait_limit,
            credential,
            lease_wait,
            session: command.session,
            load_session_id: command.load_session_id,
            mcp_servers,
            limits: command.limits,
        })
    }

    /// The named agent profile with its secret files read now, refused when unknown
    /// or unreadable (before anything is claimed or launched).
    fn agent_profile(&self, name: Option<&str>) -> Result<Option<ResolvedProfile>, EngineError> {
        let Some(name) = name else { return Ok(None) };
        let profiles = self
            .config
            .agent_profiles
            .as_ref()
            .ok_or_else(|| crate::agent_profile::unknown(name))?;
        profiles.get(name)?.resolve().map(Some)
    }

    async fn launch_execution(
        self: &Arc<Self>,
        tenant_id: &str,
        admitted: Admitted,
    ) -> Result<ExecutionRecord, EngineError> {
        let Admitted {
            workspace,
            policy,
            wait_limit,
            credential,
            lease_wait,
            mut session,
            load_session_id,
            mut mcp_servers,
            limits,
            mut agent,
        } = admitted;
        let mut limits = limits.capped_by(self.config.tenant_limits.for_tenant(tenant_id));
        limits.turn_deadline = limits.turn_deadline.or(self.config.default_turn_deadline);
        let credential_name = credential.as_ref().map(|c| c.name.as_str().to_owned());
        let workspace = workspace.display().to_string();
        let (start, home) = match load_session_id {
            None => (SessionStart::New, None),
            Some(session_id) => {
                let recorded = self
                    .recorded_session(
                        tenant_id,
                        &session_id,
                        &workspace,
                        &mut session,
                        &mut mcp_servers,
                        &mut agent,
                    )
                    .await?;
                (
                    SessionStart::Load {
                        session_id,
                        recovery: false,
                    },
                    Some(recorded),
                )
            }
        };
        let redactor = redactor_for(credential.as_ref(), agent.as_ref(), &mcp_servers);
        // Refusals (draining, quarantined, exhausted) happen here, before anything exists.
        let admitted = Instant::now();
        let reservation = self
            .pool
            .reserve(
                tenant_id,
                LaunchAs {
                    credential,
                    agent: agent.map(Arc::new),
                },
                lease_wait,
                home,
            )
            .await?;
        let now = now_ms();
        let record = ExecutionRecord {
            id: uuid::Uuid::now_v7().to_string(),
            tenant_id: tenant_id.to_owned(),
            state: ExecutionState::Starting.as_str().into(),
            // The first lease; each later lease (recovery) advances it.
            generation: 1,
            workspace,
            session_id: None,
            active_turn_id: None,
            turn_count: 0,
            pid: None,
            exit_code: None,
            exit_signal: None,
            failure_reason: None,
            failure_message: None,
            acked_sequence: 0,
            created_at_ms: now,
            updated_at_ms: now,
            approval_policy: policy.as_str().into(),
            interaction_wait_limit_ms: i64::try_from(wait_limit.as_millis()).unwrap_or(i64::MAX),
            lease: None,
            session_config: None,
            credential_name,
            turn_deadline_ms: None,
            max_turns: None,
            max_active_ms: None,
            active_ms: 0,
        };
        let mut record = record;
        limits.store_in(&mut record);
        self.execution_store().insert_execution(&record).await?;
        let span = tracing::info_span!(
            "execution.start",
            execution_id = %record.id,
            generation = record.generation,
            slot_id = tracing::field::Empty,
            warm = tracing::field::Empty,
        );
        self.bind(
            record,
            Binding {
                admitted,
                redactor,
                reservation,
                session,
                start,
                mcp_servers,
            },
        )
        .instrument(span)
        .await
    }

    /// The home of the tenant's recorded session, after checking that loading it keeps
    /// its identity: the same workspace, and the recorded model, parameters and mode
    /// (adopted when the request names none).
    async fn recorded_session(
        &self,
        tenant_id: &str,
        session_id: &str,
        workspace: &str,
        session: &mut ConfigRequest,
        mcp_servers: &mut Vec<McpServer>,
        agent: &mut Option<ResolvedProfile>,
    ) -> Result<PathBuf, EngineError> {
        let recorded = self.store.find_session(tenant_id, session_id).await?.ok_or_else(|| {
            EngineError::not_found(Reason::SessionNotFound, format!("no recorded session `{session_id}`"))
                .with("session_id", session_id)
        })?;
        if ExecutionState::parse(&recorded.state).is_some_and(|s| !s.is_terminal()) {
            return Err(EngineError::precondition(
                Reason::SessionInUse,
                format!("session `{session_id}` is open in execution `{}`", recorded.id),
            )
            .with("execution_id", recorded.id));
        }
        let mismatch = |field: &str, detail: String| {
            EngineError::precondition(Reason::SessionIdentityMismatch, detail).with("field", field)
        };
        if recorded.workspace != workspace {
            return Err(mismatch(
                "workspace",
                format!("session `{session_id}` was recorded in another workspace"),
            ));
        }
        let identity = recorded
            .session_config
            .as_deref()
            .and_then(SessionConfig::from_json)
            .unwrap_or_default();
        adopt_identity(session, &identity).map_err(|field| {
            mismatch(
                field,
                format!("session `{session_id}` was recorded with another {field}"),
            )
        })?;
        let asked: Vec<&str> = mcp_servers.iter().map(McpServer::name).collect();
        if asked.is_empty() {
            *mcp_servers = self.config.mcp_allowlist.select(&identity.mcp_servers)?;
        } else if asked != identity.mcp_servers {
            return Err(mismatch(
                "mcp_servers",
                format!("session `{session_id}` was recorded with other MCP servers"),
            ));
        }
        let recorded_profile = recorded_agent_profile(&recorded);
        match (
            agent.as_ref().map(|a| a.profile.name.as_str()),
            recorded_profile.as_deref(),
        ) {
            (None, Some(name)) => *agent = self.agent_profile(Some(name))?,
            (asked, recorded) if asked != recorded => {
                return Err(mismatch(
                    "agent_profile",
                    format!("session `{session_id}` was recorded under another agent profile"),
                ));
            }
            _ => {}
        }
        self.kept_home(&recorded, session_id)
    }

    /// The home a recorded session was kept in, checked like a workspace before it is
    /// reused: its previous agent could have planted user-level config there.
    fn kept_home(&self, recorded: &ExecutionRecord, session_id: &str) -> Result<PathBuf, EngineError> {
        let home = recorded
            .lease
            .as_deref()
            .and_then(LeaseInfo::from_json)
            .map(|l| PathBuf::from(l.home))
            .filter(|home| home.is_dir())
            .ok_or_else(|| {
                EngineError::precondition(
                    Reason::SessionNotFound,
                    format!("the history of session `{session_id}` is no longer on this node"),
                )
                .with("session_id", session_id)
            })?;
        self.config.workspace_policy.check_home(&home).map_err(policy_refusal)?;
        Ok(home)
    }

    /// `RecoverExecution`: after its agent died, a new process — under a new generation,
    /// in the session's home — loads the recorded session with its recorded model,
    /// parameters and mode. Pending interactions of the dead process stay expired.
    pub async fn recover_execution(
        self: &Arc<Self>,
        meta: RequestMeta,
        execution_id: &str,
        control_session_id: &str,
        credential: Option<CredentialBinding>,
    ) -> Result<ExecutionRecord, EngineError> {
        if *self.draining.borrow() {
            return Err(EngineError::new(
                ErrorKind::Unavailable,
                Reason::Draining,
                "the service is draining: it recovers no executions",
            ));
        }
        // The session's agent profile, read again now (its secret files too): the
        // credential presented again is admitted under it, before anything is claimed.
        let recorded = self.get_execution(&meta.tenant_id, execution_id).await?;
        let agent = self.agent_profile(recorded_agent_profile(&recorded).as_deref())?;
        let credential = credential
            .map(|binding| binding.admit(control_session_id, now_ms(), agent.as_ref().map(|a| a.profile.as_ref())))
            .transpose()?;
        let tenant_id = meta.tenant_id.clone();
        let caller = tenant_id.clone();
        let engine = self.clone();
        let id = execution_id.to_owned();
        let result = self
            .idempotent(meta, "RecoverExecution", move || async move {
                let record = engine
                    .recover(
                        &tenant_id,
                        &id,
                        LaunchAs {
                            credential,
                            agent: agent.map(Arc::new),
                        },
                    )
                    .await?;
                Ok(json!({"executionId": record.id}))
            })
            .await?;
        self.execution_from_result(&caller, &result).await
    }

    async fn recover(
        self: &Arc<Self>,
        tenant_id: &str,
        execution_id: &str,
        launch_as: LaunchAs,
    ) -> Result<ExecutionRecord, EngineError> {
        let mut record = self.get_execution(tenant_id, execution_id).await?;
        let (Some(ExecutionState::Lost), Some(session_id)) =
            (ExecutionState::parse(&record.state), record.session_id.clone())
        else {
            return Err(EngineError::precondition(
                Reason::ExecutionNotRecoverable,
                format!(
                    "execution `{}` is {} (recovery needs a lost agent's session)",
                    record.id, record.state
                ),
            )
            .with("state", record.state.clone()));
        };
        self.config
            .workspace_policy
            .check(std::path::Path::new(&record.workspace))
            .map_err(policy_refusal)?;
        let mut session = ConfigRequest::default();
        let identity = record
            .session_config
            .as_deref()
            .and_then(SessionConfig::from_json)
            .unwrap_or_default();
        adopt_identity(&mut session, &identity)
            .map_err(|_| EngineError::internal("an empty request adopts any identity"))?;
        let mcp_servers = self.config.mcp_allowlist.select(&identity.mcp_servers)?;
        // The credential presented again is the one later turns are attributed to.
        record.credential_name = launch_as.credential.as_ref().map(|c| c.name.as_str().to_owned());
        let home = self.kept_home(&record, &session_id)?;
        let redactor = redactor_for(launch_as.credential.as_ref(), launch_as.agent.as_deref(), &mcp_servers);
        let admitted = Instant::now();
        let reservation = self
            .pool
            .reserve(tenant_id, launch_as, Duration::ZERO, Some(home))
            .await?;
        // The one fence moves: whatever still speaks for the old generation is refused.
        if !self
            .store
            .advance_generation(tenant_id, &record.id, record.generation)
            .await?
        {
            return Err(EngineError::new(
                ErrorKind::Aborted,
                Reason::ExecutionFenced,
                "the execution was recovered concurrently",
            ));
        }
        record.generation += 1;
        let recorded = ExecutionState::parse(&record.state).unwrap_or(ExecutionState::Lost);
        record.state = ExecutionState::Starting.as_str().into();
        record.pid = None;
        record.exit_code = None;
        record.exit_signal = None;
        record.failure_reason = None;
        record.failure_message = None;
        record.updated_at_ms = now_ms();
        if !execution_row::save(self.execution_store().as_ref(), recorded, &record).await? {
            return Err(EngineError::new(
                ErrorKind::Aborted,
                Reason::ExecutionFenced,
                "the execution was recovered concurrently",
            ));
        }
        let span = tracing::info_span!(
            "execution.start",
            execution_id = %record.id,
            generation = record.generation,
            slot_id = tracing::field::Empty,
            warm = tracing::field::Empty,
        );
        self.bind(
            record,
            Binding {
                admitted,
                redactor,
                reservation,
                session,
                start: SessionStart::Load {
                    session_id,
                    recovery: true,
                },
                mcp_servers,
            },
        )
        .instrument(span)
        .await
    }

    /// Starts the leased process if it is cold, records the lease, and hands the
    /// process to a new actor for `record` (at its current generation).
    async fn bind(
        self: &Arc<Self>,
        mut record: ExecutionRecord,
        binding: Binding,
    ) -> Result<ExecutionRecord, EngineError> {
        let Binding {
            admitted,
            redactor,
            reservation,
            session,
            start,
            mcp_servers,
        } = binding;
        let head = self.store.head_sequence(&record.id).await?;
        let mut events = EventWriter::new(self.execution_store(), record.id.clone(), record.generation, head)
            .with_metrics(self.metrics.clone())
            .with_redactor(redactor.clone());
        let recovery = matches!(start, SessionStart::Load { recovery: true, .. });
        let (warm, is_warm) = match reservation {
            Reservation::Warm(warm) => (*warm, true),
            Reservation::Cold(cold) => match cold.start().await {
                Ok(warm) => (warm, false),
                Err(failure) => {
                    let mut exit = None;
                    if let Some(process) = failure.process {
                        let _ = events
                            .emit(
                                None,
                                vec![
                                    ActivityPayload::ProcessSpawned(cursor_runner_activity::ProcessSpawned {
                                        pid: process.pid,
                                        distribution: self.config.agent_command.distribution_label(),
                                        program: self.config.agent_command.program.display().to_string(),
                                    }),
                                    actor::exited(process.pid, process.exit, "agent"),
                                ],
                            )
                            .await;
                        record.pid = Some(i64::from(process.pid));
                        exit = Some(process.exit);
                    }
                    actor::fail_execution(&self.execution_store(), &mut record, &failure.error, exit, recovery).await;
                    self.metrics.launch_refused(failure.error.reason);
                    return Err(failure.error);
                }
            },
        };
        if let Some(capture) = &warm.ticket.capture
            && let Err(e) = capture.lease_to(&record.id, redactor.clone())
        {
            tracing::warn!(execution_id = %record.id, error = %e, "cannot hand the wire capture over");
        }
        let leased = admitted.elapsed();
        tracing::Span::current()
            .record("slot_id", warm.ticket.slot_id.as_str())
            .record("warm", is_warm);
        self.metrics.lease_took(is_warm, leased);
        let lease = LeaseInfo {
            slot_id: warm.ticket.slot_id.clone(),
            warm: is_warm,
            lease_us: micros(leased),
            spawn_us: micros(warm.timings.spawn),
            initialize_us: micros(warm.timings.initialize),
            session_new_us: None,
            sessions_served: warm.sessions_served,
            home: warm.ticket.home.display().to_string(),
            agent_profile: warm.ticket.agent.as_ref().map(|a| a.name.clone()),
            // Once the session is open (`actor::launch`).
            agent: None,
        };
        let (commands_tx, commands_rx) = mpsc::channel(64);
        {
            let mut executions = lock(&self.executions);
            // Forget executions whose actor has ended: their state lives in the store.
            executions.retain(|_, handle| !handle.commands.is_closed());
            executions.insert(
                record.id.clone(),
                ExecutionHandle {
                    tenant_id: record.tenant_id.clone(),
                    commands: commands_tx,
                    head: events.subscribe(),
                    redactor: redactor.clone(),
                },
            );
        }
        actor::launch(actor::Launch {
            store: self.execution_store(),
            config: self.config.clone(),
            pool: self.pool.clone(),
            record,
            warm,
            lease,
            events,
            commands: commands_rx,
            session,
            start,
            mcp_servers,
        })
        .await
        // Launch errors may carry the agent's words (its refusal, its stderr).
        .map_err(|e| e.redacted(&redactor))
        .inspect_err(|e| self.metrics.launch_refused(e.reason))
    }

    /// The tenant's recorded sessions (`ListSessions`): per session, its newest execution.
    pub async fn list_sessions(
        &self,
        tenant_id: &str,
        page_size: i64,
        page_token: &str,
    ) -> Result<(Vec<ExecutionRecord>, String), EngineError> {
        let limit = page_limit(page_size)?;
        let after = (!page_token.is_empty()).then_some(page_token);
        let page = self.store.list_sessions(tenant_id, after, limit).await?;
        let next = if page.len() as i64 == limit {
            page.last().and_then(|e| e.session_id.clone()).unwrap_or_default()
        } else {
            String::new()
        };
        Ok((page, next))
    }

    pub async fn get_execution(&self, tenant_id: &str, id: &str) -> Result<ExecutionRecord, EngineError> {
        self.store
            .get_execution(tenant_id, id)
            .await?
            .ok_or_else(|| EngineError::not_found(Reason::ExecutionNotFound, format!("execution `{id}` not found")))
    }

    pub async fn list_executions(
        &self,
        tenant_id: &str,
        page_size: i64,
        page_token: &str,
    ) -> Result<(Vec<ExecutionRecord>, String), EngineError> {
        let limit = page_limit(page_size)?;
        let after = (!page_token.is_empty()).then_some(page_token);
        let page = self.store.list_executions(tenant_id, after, limit).await?;
        let next = next_token(&page, limit, |e| &e.id);
        Ok((page, next))
    }

    /// A page of the execution's turns (its attempts, each attributed), and the usage
    /// summed over all of them — unknown where any turn's is unknown.
    pub async fn list_turns(
        &self,
        tenant_id: &str,
        execution_id: &str,
        page_size: i64,
        page_token: &str,
    ) -> Result<(Vec<TurnRecord>, String, UsageTotal), EngineError> {
        self.get_execution(tenant_id, execution_id).await?;
        let limit = page_limit(page_size)?;
        let after = if page_token.is_empty() {
            0
        } else {
            page_token.parse::<i64>().map_err(|_| {
                EngineError::invalid(Reason::InvalidArgument, "page_token is not one this call returned")
            })?
        };
        let page = self.store.list_turns(tenant_id, execution_id, after, limit).await?;
        let next = if page.len() as i64 == limit {
            page.last().map(|t| t.turn_number.to_string()).unwrap_or_default()
        } else {
            String::new()
        };
        let mut all = Vec::new();
        loop {
            let after = all.last().map_or(0, |t: &TurnRecord| t.turn_number);
            let batch = self.store.list_turns(tenant_id, execution_id, after, 500).await?;
            let done = batch.len() < 500;
            all.extend(batch);
            if done {
                break;
            }
        }
        Ok((page, next, UsageTotal::of(&all)))
    }

    pub async fn start_turn(
        self: &Arc<Self>,
        meta: RequestMeta,
        execution_id: &str,
        prompt: Prompt,
        replace_active: bool,
    ) -> Result<TurnRecord, EngineError> {
        let tenant_id = meta.tenant_id.clone();
        let caller = tenant_id.clone();
        let engine = self.clone();
        let id = execution_id.to_owned();
        let result = self
            .idempotent(meta, "StartTurn", move || async move {
                let turn = engine
                    .ask_actor(&tenant_id, &id, |reply| Command::StartTurn {
                        prompt,
                        replace_active,
                        reply,
                    })
                    .await?;
                Ok(json!({"turnId": turn.id}))
            })
            .await?;
        self.turn_from_result(&caller, &result).await
    }

    pub async fn cancel_turn(
        self: &Arc<Self>,
        meta: RequestMeta,
        execution_id: &str,
        turn_id: &str,
    ) -> Result<TurnRecord, EngineError> {
        let tenant_id = meta.tenant_id.clone();
        let caller = tenant_id.clone();
        let engine = self.clone();
        let (id, turn) = (execution_id.to_owned(), turn_id.to_owned());
        let result = self
            .idempotent(meta, "CancelTurn", move || async move {
                let turn = engine
                    .ask_actor(&tenant_id, &id, |reply| Command::CancelTurn { turn_id: turn, reply })
                    .await?;
                Ok(json!({"turnId": turn.id}))
            })
            .await?;
        self.turn_from_result(&caller, &result).await
    }

    pub async fn close_execution(
        self: &Arc<Self>,
        meta: RequestMeta,
        execution_id: &str,
    ) -> Result<ExecutionRecord, EngineError> {
        let tenant_id = meta.tenant_id.clone();
        let caller = tenant_id.clone();
        let engine = self.clone();
        let id = execution_id.to_owned();
        let result = self
            .idempotent(meta, "CloseExecution", move || async move {
                let record = engine.get_execution(&tenant_id, &id).await?;
                let state = ExecutionState::parse(&record.state);
                if state.is_some_and(ExecutionState::is_terminal) {
                    return Ok(json!({"executionId": record.id}));
                }
                let record = engine
                    .ask_actor(&tenant_id, &id, |reply| Command::Close { reply })
                    .await?;
                Ok(json!({"executionId": record.id}))
            })
            .await?;
        self.execution_from_result(&caller, &result).await
    }

    /// `SetModel` / `SetMode`: between turns, each echo checked.
    pub async fn configure_session(
        self: &Arc<Self>,
        meta: RequestMeta,
        execution_id: &str,
        request: ConfigRequest,
    ) -> Result<ExecutionRecord, EngineError> {
        request.validate()?;
        if request.steps().is_empty() {
            return Err(EngineError::invalid(Reason::InvalidArgument, "name a model or a mode"));
        }
        self.change_config(meta, "ConfigureSession", execution_id, ConfigChange::Request(request))
            .await
    }

    /// `SetConfigOption`: one option by id, its value checked against what the agent
    /// offers and its echo.
    pub async fn set_config_option(
        self: &Arc<Self>,
        meta: RequestMeta,
        execution_id: &str,
        config_id: String,
        value: String,
    ) -> Result<ExecutionRecord, EngineError> {
        let valid = |t: &str| !t.is_empty() && t.chars().count() <= crate::session_config::MAX_CONFIG_TEXT_CHARS;
        if !valid(&config_id) || !valid(&value) {
            return Err(EngineError::invalid(
                Reason::InvalidArgument,
                "config_id and value must have 1 to 200 characters",
            ));
        }
        self.change_config(
            meta,
            "SetConfigOption",
            execution_id,
            ConfigChange::Option { config_id, value },
        )
        .await
    }

    async fn change_config(
        self: &Arc<Self>,
        meta: RequestMeta,
        operation: &str,
        execution_id: &str,
        change: ConfigChange,
    ) -> Result<ExecutionRecord, EngineError> {
        let tenant_id = meta.tenant_id.clone();
        let caller = tenant_id.clone();
        let engine = self.clone();
        let id = execution_id.to_owned();
        let result = self
            .idempotent(meta, operation, move || async move {
                let record = engine
                    .ask_actor(&tenant_id, &id, |reply| Command::Configure { change, reply })
                    .await?;
                Ok(json!({"executionId": record.id}))
            })
            .await?;
        self.execution_from_result(&caller, &result).await
    }

    /// The agent's model catalog (`ListModels`).
    pub async fn list_models(&self, tenant_id: &str, execution_id: &str) -> Result<ModelCatalog, EngineError> {
        self.ask_actor(tenant_id, execution_id, |reply| Command::ListModels { reply })
            .await
    }

    pub async fn get_interaction(&self, tenant_id: &str, id: &str) -> Result<InteractionRecord, EngineError> {
        self.store
            .get_interaction(tenant_id, id)
            .await?
            .ok_or_else(|| EngineError::not_found(Reason::InteractionNotFound, format!("interaction `{id}` not found")))
    }

    pub async fn list_interactions(
        &self,
        tenant_id: &str,
        execution_id: Option<String>,
        state: Option<String>,
        page_size: i64,
        page_token: &str,
    ) -> Result<(Vec<InteractionRecord>, String), EngineError> {
        if let Some(state) = state.as_deref()
            && InteractionState::parse(state).is_none()
        {
            return Err(EngineError::invalid(
                Reason::InvalidArgument,
                format!("unknown state `{state}`"),
            ));
        }
        let limit = page_limit(page_size)?;
        let page = self
            .store
            .list_interactions(&InteractionQuery {
                tenant_id: tenant_id.to_owned(),
                execution_id,
                state,
                after_id: (!page_token.is_empty()).then(|| page_token.to_owned()),
                limit,
            })
            .await?;
        let next = next_token(&page, limit, |i| &i.id);
        Ok((page, next))
    }

    pub async fn answer_interaction(
        self: &Arc<Self>,
        meta: RequestMeta,
        command: AnswerCommand,
    ) -> Result<InteractionRecord, EngineError> {
        let record = self.get_interaction(&meta.tenant_id, &command.interaction_id).await?;
        let fingerprint = command.answer.fingerprint();
        // A retry of the answer that won: the stored result, whatever happened since —
        // once the winner has finished. While it is `answered` the winner is still on its
        // way to the pipe, so the retry joins it below and returns what the winner returns.
        if record.answer_request_id.as_deref() == Some(meta.request_id.as_str())
            && record.state != InteractionState::Answered.as_str()
        {
            return if record.answer_fingerprint.as_deref() == Some(fingerprint.as_str()) {
                Ok(record)
            } else {
                Err(EngineError::new(
                    ErrorKind::Aborted,
                    Reason::AnswerConflict,
                    "this request_id already answered the interaction differently",
                ))
            };
        }
        let tenant_id = meta.tenant_id.clone();
        let caller = tenant_id.clone();
        let engine = self.clone();
        let result = self
            .idempotent(meta.clone(), "AnswerInteraction", move || async move {
                let execution_id = record.execution_id.clone();
                let request_id = meta.request_id.clone();
                let answered = engine
                    .ask_actor(&tenant_id, &execution_id, |reply| Command::Answer {
                        record: Box::new(record),
                        etag: command.etag,
                        request_id,
                        answer: command.answer,
                        reply,
                    })
                    .await;
                match answered {
                    Ok(record) => Ok(json!({"interactionId": record.id})),
                    Err(e) if e.reason == Reason::ExecutionNotReady => Err(not_pending(
                        &engine.get_interaction(&tenant_id, &command.interaction_id).await?,
                    )),
                    Err(e) => Err(e),
                }
            })
            .await?;
        let id = result["interactionId"].as_str().unwrap_or_default();
        self.get_interaction(&caller, id).await
    }

    /// Replays committed events after `after_sequence`, then tails live ones.
    pub async fn stream_events(
        &self,
        tenant_id: &str,
        execution_id: &str,
        after_sequence: i64,
    ) -> Result<mpsc::Receiver<Result<StreamItem, EngineError>>, EngineError> {
        let record = self.get_execution(tenant_id, execution_id).await?;
        if after_sequence < 0 {
            return Err(EngineError::invalid(
                Reason::InvalidArgument,
                "after_sequence must not be negative",
            ));
        }
        let head = self.store.head_sequence(&record.id).await?;
        if after_sequence > head {
            return Err(EngineError::new(
                ErrorKind::OutOfRange,
                Reason::CursorAheadOfHead,
                format!("after_sequence {after_sequence} is beyond the head {head}"),
            )
            .with("head_sequence", head.to_string()));
        }
        if let Some(oldest) = self.store.oldest_sequence(&record.id).await?
            && after_sequence < oldest - 1
        {
            return Err(events_pruned(after_sequence, oldest));
        }
        let executions = self.executions.clone();
        let live_head = move |id: &str| lock(&executions).get(id).map(|h| h.head.clone());
        // Not live here: its head does not move, unless a recovery gives it a writer.
        let mut head_rx = live_head(&record.id).unwrap_or_else(|| watch::channel(head).1);
        let mut writer_gone = head_rx.has_changed().is_err();
        let (tx, rx) = mpsc::channel(SUBSCRIBER_BUFFER);
        let store = self.store.clone();
        let heartbeat = self.config.heartbeat_interval;
        let mut draining = self.closing_streams.subscribe();
        let open_stream = self.metrics.stream_opened();
        tokio::spawn(async move {
            let _open_stream = open_stream;
            let mut cursor = after_sequence;
            let mut caught_up = false;
            loop {
                let page = match store.read_events(&record.id, cursor, REPLAY_PAGE).await {
                    Ok(page) => page,
                    Err(e) => {
                        let _ = tx.send(Err(e.into())).await;
                        return;
                    }
                };
                let full = page.len() as i64 == REPLAY_PAGE;
                // Pruned while this stream replayed: say so rather than skip a gap.
                if let Some(first) = page.first()
                    && first.sequence != cursor + 1
                {
                    let _ = tx.send(Err(events_pruned(cursor, first.sequence))).await;
                    return;
                }
                for event in page {
                    cursor = event.sequence;
                    if tx.send(Ok(StreamItem::Event(event))).await.is_err() {
                        return;
                    }
                }
                if full {
                    continue;
                }
                if !caught_up {
                    caught_up = true;
                    if tx
                        .send(Ok(StreamItem::CaughtUp { head_sequence: cursor }))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                // Wait for the head to pass the cursor, or send a heartbeat when idle.
                loop {
                    if *head_rx.borrow_and_update() > cursor {
                        break;
                    }
                    tokio::select! {
                        changed = head_rx.changed(), if !writer_gone => {
                            if changed.is_err() {
                                // The execution's writer is gone; a recovery may bring another.
                                writer_gone = true;
                            }
                        }
                        () = tokio::time::sleep(WRITER_POLL), if writer_gone => {
                            if let Some(fresh) = live_head(&record.id).filter(|rx| rx.has_changed().is_ok()) {
                                head_rx = fresh;
                                writer_gone = false;
                            }
                            // Page the store once more either way.
                            break;
                        }
                        () = tokio::time::sleep(heartbeat) => {
                            if tx.send(Ok(StreamItem::Heartbeat { head_sequence: cursor })).await.is_err() {
                                return;
                            }
                        }
                        () = tx.closed() => return,
                        _ = async { draining.wait_for(|d| *d).await.map(|_| ()) } => {
                            let _ = tx.send(Err(EngineError::new(
                                ErrorKind::Unavailable,
                                Reason::ServiceShuttingDown,
                                format!("the service is shutting down; resume from sequence {cursor}"),
                            )
                            .with("resume_after_sequence", cursor.to_string())))
                            .await;
                            return;
                        }
                    }
                }
            }
        });
        Ok(rx)
    }

    /// Records the control plane's cumulative acknowledgement.
    pub async fn ack_events(&self, tenant_id: &str, execution_id: &str, through: i64) -> Result<i64, EngineError> {
        let record = self.get_execution(tenant_id, execution_id).await?;
        let head = self.store.head_sequence(&record.id).await?;
        if through > head {
            return Err(EngineError::invalid(
                Reason::AckBeyondHead,
                format!("through_sequence {through} is beyond the head {head}"),
            ));
        }
        if through < record.acked_sequence {
            return Err(EngineError::precondition(
                Reason::AckRegression,
                format!(
                    "through_sequence {through} is below the acknowledged {}",
                    record.acked_sequence
                ),
            ));
        }
        self.store.set_acked_sequence(tenant_id, &record.id, through).await?;
        Ok(through)
    }

    /// Ends every open event stream with `UNAVAILABLE` (clients resume elsewhere from
    /// their cursor), so a graceful server shutdown is not held open by tails.
    pub fn end_streams(&self) {
        self.draining.send_replace(true);
        self.metrics.draining();
        self.closing_streams.send_replace(true);
    }

    /// Closes every live execution and stops the pool (service shutdown): no agent
    /// outlives the service.
    pub async fn shutdown(&self) {
        for task in lock(&self.background).drain(..) {
            task.abort();
        }
        self.end_streams();
        self.pool.drain();
        let handles: Vec<mpsc::Sender<(Command, tracing::Span)>> =
            lock(&self.executions).values().map(|h| h.commands.clone()).collect();
        for commands in handles {
            let (reply, rx) = oneshot::channel();
            if commands
                .send((Command::Close { reply }, tracing::Span::current()))
                .await
                .is_ok()
            {
                let _ = rx.await;
            }
        }
        self.pool.stopped(self.config.stop_grace * 2).await;
    }

    async fn ask_actor<T>(
        &self,
        tenant_id: &str,
        execution_id: &str,
        make: impl FnOnce(oneshot::Sender<Result<T, EngineError>>) -> Command,
    ) -> Result<T, EngineError> {
        let record = self.get_execution(tenant_id, execution_id).await?;
        let handle = lock(&self.executions)
            .get(&record.id)
            .map(|h| (h.commands.clone(), h.redactor.clone()));
        let not_ready = || {
            EngineError::precondition(
                Reason::ExecutionNotReady,
                format!("execution `{}` is {}", record.id, record.state),
            )
            .with("state", record.state.clone())
        };
        let (commands, redactor) = handle.ok_or_else(not_ready)?;
        let (reply, rx) = oneshot::channel();
        // The caller's span goes along: the actor works on the command inside it.
        commands
            .send((make(reply), tracing::Span::current()))
            .await
            .map_err(|_| not_ready())?;
        // The actor's refusals may quote the agent (e.g. a configuration it refused).
        rx.await.map_err(|_| not_ready())?.map_err(|e| e.redacted(&redactor))
    }

    /// Runs `run` once per (tenant, operation, request_id). A retry with the same body
    /// while the first call runs joins it; after it, gets its stored result; with
    /// another body, is refused. The work runs in its own task, so a client that
    /// disconnects cannot abandon it half-done.
    async fn idempotent<F, Fut>(&self, meta: RequestMeta, operation: &str, run: F) -> Result<Value, EngineError>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Value, EngineError>> + Send + 'static,
    {
        if meta.request_id.is_empty() {
            return Err(EngineError::invalid(
                Reason::RequestIdRequired,
                "request_id is required",
            ));
        }
        let key = IdempotencyKey {
            tenant_id: meta.tenant_id.clone(),
            operation: operation.to_owned(),
            request_id: meta.request_id.clone(),
        };
        let reused = || {
            EngineError::new(
                ErrorKind::Aborted,
                Reason::RequestIdReused,
                "request_id was used with another request",
            )
        };
        let joined = {
            let mut in_flight = lock(&self.in_flight);
            match in_flight.get(&key) {
                Some((digest, _)) if *digest != meta.request_digest => return Err(reused()),
                Some((_, rx)) => Some(rx.clone()),
                None => {
                    let (tx, rx) = watch::channel(None);
                    in_flight.insert(key.clone(), (meta.request_digest.clone(), rx));
                    drop(in_flight);
                    let store = self.store.clone();
                    // The outcome must be recorded, or the key would answer "in flight"
                    // until the next start: it waits for the store if need be.
                    let recorder = self.store.with_patience(Patience::UntilBack);
                    let digest = meta.request_digest.clone();
                    let owner_key = key.clone();
                    tokio::spawn(tracing::Instrument::in_current_span(async move {
                        let result = match store.claim_idempotency(&owner_key, &digest).await {
                            Err(e) => Err(e.into()),
                            Ok(IdempotencyClaim::Completed(stored)) => {
                                EngineError::from_json(&stored).map_or(Ok(stored), Err)
                            }
                            Ok(IdempotencyClaim::DigestMismatch) => Err(reused()),
                            Ok(IdempotencyClaim::InFlight) => Err(EngineError::new(
                                ErrorKind::Aborted,
                                Reason::RequestInFlight,
                                "a call with this request_id is in flight elsewhere; retry later",
                            )),
                            Ok(IdempotencyClaim::Claimed) => {
                                let result = run().await;
                                let recorded = match &result {
                                    Ok(value) => recorder.complete_idempotency(&owner_key, value).await,
                                    // A refusal changed nothing: the key stays free, so the
                                    // caller may fix the request and send it again. A store
                                    // outage is no outcome either: the same call may be
                                    // retried (each write it made is its own to find again).
                                    Err(e) if e.is_refusal() || e.is_transient() => {
                                        recorder.release_idempotency(&owner_key).await
                                    }
                                    Err(e) => recorder.complete_idempotency(&owner_key, &e.to_json()).await,
                                };
                                match recorded {
                                    Ok(()) => result,
                                    Err(e) => Err(e.into()),
                                }
                            }
                        };
                        tx.send_replace(Some(result));
                    }));
                    None
                }
            }
        };
        let mut rx = match joined {
            Some(rx) => rx,
            None => lock(&self.in_flight)
                .get(&key)
                .map(|(_, rx)| rx.clone())
                .ok_or_else(|| EngineError::internal("lost an in-flight call"))?,
        };
        let result = loop {
            if let Some(result) = rx.borrow_and_update().clone() {
                break result;
            }
            if rx.changed().await.is_err() {
                break rx
                    .borrow()
                    .clone()
                    .unwrap_or_else(|| Err(EngineError::internal("an in-flight call vanished")));
            }
        };
        lock(&self.in_flight).remove(&key);
        result
    }

    /// Stored results name resources of the caller's own tenant; reading them back
    /// stays tenant-scoped.
    async fn execution_from_result(&self, tenant_id: &str, result: &Value) -> Result<ExecutionRecord, EngineError> {
        let id = result["executionId"]
            .as_str()
            .ok_or_else(|| EngineError::internal("malformed stored result"))?;
        self.get_execution(tenant_id, id).await
    }

    async fn turn_from_result(&self, tenant_id: &str, result: &Value) -> Result<TurnRecord, EngineError> {
        let id = result["turnId"]
            .as_str()
            .ok_or_else(|| EngineError::internal("malformed stored result"))?;
        self.store
            .get_turn(tenant_id, id)
            .await?
            .ok_or_else(|| EngineError::not_found(Reason::TurnNotFound, format!("turn `{id}` not found")))
    }

    /// A key still `in_flight` at start-up belongs to a call that died with the previous
    /// incarnation (one service per database): it gets a final, typed outcome, so a retry
    /// is neither refused for ever ("in flight elsewhere") nor run a second time.
    async fn complete_abandoned_calls(&self) -> Result<(), EngineError> {
        let interrupted = EngineError::new(
            ErrorKind::Aborted,
            Reason::RequestInterrupted,
            "the service stopped while this call ran; what it had begun was settled at restart; \
             send a new request_id to try again",
        );
        let completed = self
            .store
            .complete_abandoned_idempotency(&interrupted.to_json())
            .await?;
        if completed > 0 {
            tracing::warn!(
                completed,
                "calls interrupted by the previous incarnation were completed as REQUEST_INTERRUPTED"
            );
        }
        Ok(())
    }

    async fn recover_after_restart(&self) -> Result<(), EngineError> {
        for mut execution in self.store.list_live_executions().await? {
            let Some(recorded) = ExecutionState::parse(&execution.state) else {
                continue;
            };
            let head = self.store.head_sequence(&execution.id).await?;
            let mut events = EventWriter::new(self.store.clone(), execution.id.clone(), execution.generation, head)
                .with_metrics(self.metrics.clone());
            for state in [InteractionState::Pending, InteractionState::Answered] {
                let stranded = self
                    .store
                    .list_interactions(&InteractionQuery {
                        tenant_id: execution.tenant_id.clone(),
                        execution_id: Some(execution.id.clone()),
                        state: Some(state.as_str().into()),
                        after_id: None,
                        limit: i64::MAX,
                    })
                    .await?;
                for mut interaction in stranded {
                    interaction.state = InteractionState::Expired.as_str().into();
                    interaction.reason = Some("service_restarted".into());
                    interaction.delivery = Some(
                        if state == InteractionState::Answered {
                            "unknown"
                        } else {
                            "not_sent"
                        }
                        .into(),
                    );
                    interaction.replay_allowed = false;
                    interaction.updated_at_ms = now_ms();
                    if interaction::transition(self.store.as_ref(), state, &interaction).await? {
                        let payload = ActivityPayload::RuntimeRequestExpired(RuntimeRequestEnded {
                            interaction_id: interaction.id.clone(),
                            kind: kind_of(&interaction.kind),
                            turn_id: interaction.turn_id.clone(),
                            reason: "service_restarted".into(),
                            replay_allowed: false,
                            delivery: interaction.delivery.clone().unwrap_or_default(),
                            request: serde_json::from_str(&interaction.request).ok(),
                        });
                        events.emit(Some(&interaction.turn_id), vec![payload]).await?;
                    }
                }
            }
            if let Some(turn_id) = execution.active_turn_id.take()
                && let Some(mut turn) = self.store.get_turn(&execution.tenant_id, &turn_id).await?
            {
                turn.state = TurnState::Failed.as_str().into();
                turn.failure_reason = Some(TurnFailureReason::ProviderLost.as_str().into());
                turn.failure_message = Some("the service restarted; the agent process is gone".into());
                turn.ended_at_ms = Some(now_ms());
                if self.store.settle_turn(&turn).await? {
                    let payload = ActivityPayload::TurnFailed(TurnSettled {
                        turn_id: turn.id.clone(),
                        stop_reason: None,
                        failure_reason: Some(TurnFailureReason::ProviderLost),
                        message: turn.failure_message.clone(),
                    });
                    events.emit(Some(&turn.id), vec![payload]).await?;
                }
            }
            execution.state = ExecutionState::Lost.as_str().into();
            execution.failure_reason = Some("service_restarted".into());
            execution.updated_at_ms = now_ms();
            execution_row::save(self.store.as_ref(), recorded, &execution).await?;
        }
        Ok(())
    }
}

/// Fills what `request` leaves empty from a recorded identity; `Err` names the first
/// field it asks differently (model, model_parameters, mode).
fn adopt_identity(request: &mut ConfigRequest, recorded: &SessionConfig) -> Result<(), &'static str> {
    match (&request.model, &recorded.model) {
        (None, model) => {
            request.model = model.clone();
            request.parameters = recorded.parameters.clone();
        }
        (Some(asked), Some(model)) if asked == model => {
            if request
                .parameters
                .iter()
                .any(|(k, v)| recorded.parameters.get(k) != Some(v))
            {
                return Err("model_parameters");
            }
            request.parameters = recorded.parameters.clone();
        }
        (Some(_), _) => return Err("model"),
    }
    match (&request.mode, &recorded.mode) {
        (None, mode) => request.mode = mode.clone(),
        (Some(asked), Some(mode)) if asked == mode => {}
        (Some(_), _) => return Err("mode"),
    }
    Ok(())
}

/// How long start-up waits for the database's previous service (e.g. a pod still
/// stopping) to let go before it refuses to start.
pub const SOLE_SERVICE_WAIT: Duration = Duration::from_secs(5);

async fn claim_sole_service(store: &dyn Store) -> Result<(), EngineError> {
    let deadline = tokio::time::Instant::now() + SOLE_SERVICE_WAIT;
    loop {
        match store.claim_sole_service().await {
            Err(StoreError::AnotherService) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other.map_err(EngineError::from),
        }
    }
}

/// Samples head − acknowledged for every live execution, every
/// [`OUTBOX_LAG_SAMPLE_INTERVAL`], until the engine is gone.
async fn sample_outbox_lag(engine: std::sync::Weak<Engine>) {
    let mut every = tokio::time::interval(OUTBOX_LAG_SAMPLE_INTERVAL);
    loop {
        every.tick().await;
        let Some(engine) = engine.upgrade() else { return };
        let live: Vec<(String, String, i64)> = lock(&engine.executions)
            .iter()
            .filter(|(_, handle)| !handle.commands.is_closed())
            .map(|(id, handle)| (id.clone(), handle.tenant_id.clone(), *handle.head.borrow()))
            .collect();
        for (id, tenant_id, head) in live {
            if let Ok(Some(record)) = engine.store.get_execution(&tenant_id, &id).await {
                engine.metrics.outbox_lag(head - record.acked_sequence);
            }
        }
    }
}

/// A cursor below the oldest event still kept (the rest was acknowledged and pruned).
fn events_pruned(after_sequence: i64, oldest: i64) -> EngineError {
    EngineError::new(
        ErrorKind::OutOfRange,
        Reason::EventsPruned,
        format!(
            "events after {after_sequence} up to {} were acknowledged and pruned; the oldest kept is {oldest}",
            oldest - 1
        ),
    )
    .with("oldest_sequence", oldest.to_string())
}

fn validate_workspace(workspace: &str) -> Result<PathBuf, EngineError> {
    let path = PathBuf::from(workspace);
    if !path.is_absolute() {
        return Err(EngineError::invalid(
            Reason::WorkspaceInvalid,
            "workspace must be an absolute path",
        ));
    }
    match std::fs::canonicalize(&path) {
        Ok(real) if real.is_dir() => Ok(real),
        _ => Err(EngineError::precondition(
            Reason::WorkspaceInvalid,
            format!("workspace `{workspace}` is not an existing directory"),
        )),
    }
}

fn page_limit(page_size: i64) -> Result<i64, EngineError> {
    match page_size {
        0 => Ok(DEFAULT_PAGE_SIZE),
        n if n < 0 => Err(EngineError::invalid(
            Reason::InvalidArgument,
            "page_size must not be negative",
        )),
        n => Ok(n.min(MAX_PAGE_SIZE)),
    }
}

fn next_token<T>(page: &[T], limit: i64, id: impl Fn(&T) -> &String) -> String {
    if page.len() as i64 == limit {
        page.last().map(|last| id(last).clone()).unwrap_or_default()
    } else {
        String::new()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn recorded() -> SessionConfig {
        SessionConfig {
            model: Some("gpt-x".into()),
            parameters: BTreeMap::from([("effort".into(), "high".into()), ("fast".into(), "false".into())]),
            mode: Some("plan".into()),
            ..SessionConfig::default()
        }
    }

    fn asked(model: Option<&str>, parameters: &[(&str, &str)], mode: Option<&str>) -> ConfigRequest {
        ConfigRequest {
            model: model.map(str::to_owned),
            parameters: parameters.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            mode: mode.map(str::to_owned),
        }
    }

    #[test]
    fn a_load_adopts_what_is_empty_and_refuses_what_differs_naming_the_field() {
        let cases: [(ConfigRequest, Result<(), &str>); 7] = [
            (asked(None, &[], None), Ok(())),
            (asked(Some("gpt-x"), &[], Some("plan")), Ok(())),
            (asked(Some("gpt-x"), &[("effort", "high")], None), Ok(())),
            (asked(Some("claude-y"), &[], None), Err("model")),
            (
                asked(Some("gpt-x"), &[("effort", "low")], None),
                Err("model_parameters"),
            ),
            (asked(Some("gpt-x"), &[("depth", "9")], None), Err("model_parameters")),
            (asked(None, &[], Some("ask")), Err("mode")),
        ];
        for (mut request, expected) in cases {
            let outcome = adopt_identity(&mut request, &recorded());
            assert_eq!(outcome, expected, "{request:?}");
            if outcome.is_ok() {
                assert_eq!(request.model.as_deref(), Some("gpt-x"));
                assert_eq!(request.parameters, recorded().parameters, "every recorded parameter");
                assert_eq!(request.mode.as_deref(), Some("plan"));
            }
        }
    }
}
