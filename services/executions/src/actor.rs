//! One execution's actor: it owns the agent process and its connection, and is the
//! only writer of the execution's turns, interactions and events. Commands from the
//! engine and messages from the agent are handled one at a time, so fences and state
//! transitions never race inside one replica; the store's compare-and-set updates
//! guard them across replicas and restarts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cursor_runner_acp::cursor::{self, AskQuestionParams, CreatePlanParams};
use cursor_runner_acp::{AcpConnection, AcpError, AgentRequest, Inbound, InboundStream, RpcError, schema};
use cursor_runner_activity::*;
use cursor_runner_store::{ExecutionRecord, InteractionRecord, Patience, Store, StoreError, TurnRecord, now_ms};
use cursor_runner_supervisor::workspace_paths::workspace_file;
use cursor_runner_supervisor::workspace_watch::{Violation, WatchGuard, WorkspaceWatcher};
use cursor_runner_supervisor::{AgentProcess, ExitProof};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::Instrument;

use crate::attempts;
use crate::config::{EngineConfig, ViolationAction};
use crate::error::policy_refusal;
use crate::error::{EngineError, ErrorKind, Reason};
use crate::events::EventWriter;
use crate::execution_row;
use crate::handshake::{self, SessionStart};
use crate::interaction::{
    self, ApprovalPolicy, InteractionAnswer, PermissionRequest, PersistedRequest, PlanRequest, QuestionRequest,
    RequestRefused, cancelled_result,
};
use crate::interaction::{kind_of, not_pending};
use crate::lease::LeaseInfo;
use crate::limits::ExecutionLimits;
use crate::mcp::McpServer;
use crate::pool::{Pool, SlotTicket, WarmProcess, exit_message};
use crate::prompt::{Prompt, PromptCapabilities};
use crate::session_config::{self, ConfigRequest, SessionConfig};
use crate::state::{ExecutionState, InteractionState, TurnState};

type Reply<T> = oneshot::Sender<Result<T, EngineError>>;

/// Most `session/update`s normalized into one outbox append.
const MAX_UPDATES_PER_APPEND: usize = 256;

pub(crate) enum Command {
    StartTurn {
        prompt: Prompt,
        replace_active: bool,
        reply: Reply<TurnRecord>,
    },
    CancelTurn {
        turn_id: String,
        reply: Reply<TurnRecord>,
    },
    Answer {
        record: Box<InteractionRecord>,
        etag: String,
        request_id: String,
        answer: InteractionAnswer,
        reply: Reply<InteractionRecord>,
    },
    Close {
        reply: Reply<ExecutionRecord>,
    },
    /// `SetModel`, `SetMode`, `SetConfigOption`.
    Configure {
        change: ConfigChange,
        reply: Reply<ExecutionRecord>,
    },
    ListModels {
        reply: Reply<ModelCatalog>,
    },
    /// The service drains: let the running turn settle until `deadline`, then cancel
    /// it; close once no turn runs. Replies when the execution is closed. A second
    /// drain may only bring the deadline forward.
    Drain {
        deadline: Instant,
        reply: Reply<ExecutionRecord>,
    },
}

impl Command {
    fn name(&self) -> &'static str {
        match self {
            Self::StartTurn { .. } => "start_turn",
            Self::CancelTurn { .. } => "cancel_turn",
            Self::Answer { .. } => "answer",
            Self::Close { .. } => "close",
            Self::Drain { .. } => "drain",
            Self::Configure { .. } => "configure",
            Self::ListModels { .. } => "list_models",
        }
    }
}

struct ActiveTurn {
    record: TurnRecord,
    normalizer: TurnNormalizer,
    /// Our JSON-RPC id of the turn's `session/prompt`.
    prompt_request_id: Option<i64>,
    /// The service, not the caller, cancelled this turn (a `replace_active` start, or
    /// the drain deadline): a `cancelled` stop settles it `interrupted` with this reason.
    interrupted_by: Option<TurnFailureReason>,
    cancel_deadline: Option<Instant>,
    /// When a bound before spend cancels the turn, and which (`deadline_exceeded`,
    /// `budget_exhausted`); taken once it fires.
    bound: Option<(Instant, TurnFailureReason)>,
    /// The last sign of life on the turn: a message from the agent, or the end of a
    /// wait on a human. The idle watchdog counts from here.
    last_activity: Instant,
    /// The turn's span, a child of the `StartTurn` call's (so of the caller's trace);
    /// ends when the turn settles.
    span: tracing::Span,
}

struct PendingInteraction {
    record: InteractionRecord,
    request: AgentRequest,
    persisted: PersistedRequest,
    /// When a question or plan is handed off durably if still unanswered.
    handoff_at: Instant,
}

struct Actor {
    store: Arc<dyn Store>,
    config: Arc<EngineConfig>,
    pool: Pool,
    record: ExecutionRecord,
    /// The state `record`'s row is in, as last written: every write compares and sets it.
    stored_state: ExecutionState,
    events: EventWriter,
    process: AgentProcess,
    connection: AcpConnection,
    /// The leased slot; `None` once the process went back to the pool.
    ticket: Option<SlotTicket>,
    /// What the process's `initialize` answered, and the prompt content it accepts.
    initialized: Value,
    prompt_capabilities: PromptCapabilities,
    /// Sessions the process served before this one.
    sessions_served: u32,
    session_id: String,
    /// The agent's latest `configOptions` (empty on builds without them).
    config_options: Value,
    /// The flat `models` list of `session/new`, for builds without `configOptions`.
    legacy_models: Value,
    /// ACP `modes` of `session/new` (`availableModes`), for agents without `configOptions`.
    modes: Value,
    /// The operator's agent profile: its ask modes bound every mode change.
    agent_profile: Option<Arc<crate::agent_profile::AgentProfile>>,
    /// The runner-owned MCP servers (allowlist names) the session was opened with: part
    /// of its recorded identity, kept through every configuration change.
    mcp_servers: Vec<String>,
    turn: Option<ActiveTurn>,
    session_normalizer: TurnNormalizer,
    pending: HashMap<String, PendingInteraction>,
    policy: ApprovalPolicy,
    wait_limit: Duration,
    /// Keeps the workspace watched while the actor lives.
    _workspace_watch: Option<WatchGuard>,
    /// The prompt of a `replace_active` start, sent once the replaced turn settles.
    queued_start: Option<(Prompt, Reply<TurnRecord>)>,
    /// Set by a clean close the pool accepts: the process serves another session.
    reuse: bool,
    /// The service is draining: refuse new turns, settle the running one by the
    /// deadline (else cancel it), then close.
    drain: Option<Drain>,
}

struct Drain {
    deadline: Instant,
    cancelled: bool,
    replies: Vec<Reply<ExecutionRecord>>,
}

/// What [`launch`] binds: a leased process and the execution it now serves.
pub(crate) struct Launch {
    pub store: Arc<dyn Store>,
    pub config: Arc<EngineConfig>,
    pub pool: Pool,
    pub record: ExecutionRecord,
    pub warm: WarmProcess,
    pub lease: LeaseInfo,
    pub events: EventWriter,
    pub commands: mpsc::Receiver<(Command, tracing::Span)>,
    /// The model, parameters and mode to apply before any prompt.
    pub session: ConfigRequest,
    pub start: SessionStart,
    /// Runner-owned MCP servers for `session/new` / `session/load`.
    pub mcp_servers: Vec<McpServer>,
}

/// Binds a leased process to the execution: `process.spawned`, then `session/new` or
/// `session/load` (after the workspace policy is checked again), then the requested
/// configuration; on success leaves an actor running.
pub(crate) async fn launch(launch: Launch) -> Result<ExecutionRecord, EngineError> {
    let Launch {
        store,
        config,
        pool,
        mut record,
        warm,
        mut lease,
        mut events,
        commands,
        session: mut session_request,
        start,
        mcp_servers,
    } = launch;
    let WarmProcess {
        mut process,
        connection,
        mut inbound,
        initialized,
        sessions_served,
        mut ticket,
        ..
    } = warm;
    record.pid = Some(i64::from(process.pid()));
    let command = ticket.agent.as_ref().map_or(&config.agent_command, |a| &a.command);
    events
        .emit(
            None,
            vec![ActivityPayload::ProcessSpawned(ProcessSpawned {
                pid: process.pid(),
                distribution: command.distribution_label(),
                program: command.program.display().to_string(),
            })],
        )
        .await?;
    let began = std::time::Instant::now();
    let (workspace, policy, limit) = (&record.workspace, &config.workspace_policy, config.handshake_timeout);
    let mcp = serde_json::to_value(&mcp_servers).map_err(|e| EngineError::internal(e.to_string()))?;
    let unsupported = mcp_servers.iter().find(|s| !s.supported_by(&initialized)).map(|s| {
        EngineError::precondition(
            Reason::McpTransportUnsupported,
            format!("the agent does not take MCP server `{}`'s transport", s.name()),
        )
        .with("server", s.name())
    });
    let (opened, loaded) = match (&start, unsupported) {
        (_, Some(refusal)) => (Err(refusal), None),
        (SessionStart::New, None) => (
            handshake::new_session(&connection, workspace, &mcp, policy, limit)
                .await
                .map_err(|e| handshake::with_auth_methods(e, &initialized)),
            None,
        ),
        (SessionStart::Load { session_id, recovery }, None) => {
            match handshake::load_session(&connection, &mut inbound, session_id, workspace, &mcp, policy, limit).await {
                Ok((opened, replayed)) => (
                    Ok(opened),
                    Some(ActivityPayload::SessionLoaded(SessionLoaded {
                        session_id: session_id.clone(),
                        recovery: *recovery,
                        generation: record.generation,
                        replayed_updates_suppressed: replayed,
                    })),
                ),
                Err(e) => (Err(e), None),
            }
        }
    };
    lease.session_new_us = Some(crate::lease::micros(began.elapsed()));
    lease.agent = Some(crate::lease::AgentReport::new(
        &initialized,
        opened.as_ref().ok().map(|o| (&o.config_options, &o.modes, &o.models)),
        ticket.agent.is_some(),
    ));
    record.lease = Some(lease.to_json());
    let recovery = matches!(start, SessionStart::Load { recovery: true, .. });
    if opened.is_ok() {
        // The session's history lives in this home from now on.
        ticket.keep_home();
    }
    if let Some(loaded) = loaded {
        events.emit(None, vec![loaded]).await?;
    }
    let agent_profile = ticket.agent.clone();
    match opened {
        Ok(opened) => {
            record.session_id = Some(opened.session_id.clone());
            let mut actor = Actor {
                store,
                config,
                pool,
                stored_state: ExecutionState::parse(&record.state).unwrap_or(ExecutionState::Starting),
                record: record.clone(),
                events,
                process,
                connection,
                ticket: Some(ticket),
                prompt_capabilities: PromptCapabilities::from_initialize(&initialized),
                initialized,
                sessions_served,
                session_normalizer: TurnNormalizer::new("session")
                    .with_workspace(record.workspace.clone())
                    .with_root_session(opened.session_id.clone())
                    .between_turns(),
                session_id: opened.session_id,
                config_options: opened.config_options,
                legacy_models: opened.models,
                modes: opened.modes,
                agent_profile: agent_profile.clone(),
                mcp_servers: mcp_servers.iter().map(|s| s.name().to_owned()).collect(),
                turn: None,
                pending: HashMap::new(),
                policy: ApprovalPolicy::parse(&record.approval_policy).unwrap_or_default(),
                wait_limit: Duration::from_millis(record.interaction_wait_limit_ms.max(0) as u64),
                _workspace_watch: None,
                queued_start: None,
                reuse: false,
                drain: None,
            };
            // Under an agent profile, the mode that makes the agent ask (every approval
            // policy needs it to), then the caller's model, parameters and mode before any
            // prompt, each echo checked.
            if let Err(error) = actor.require_ask_mode(&mut session_request) {
                return Err(actor.fail_launch(error, recovery).await);
            }
            if let Err(error) = actor.configure(&session_request).await {
                return Err(actor.fail_launch(error, recovery).await);
            }
            actor.record.state = ExecutionState::Ready.as_str().into();
            actor.save_record().await?;
            let record = actor.record.clone();
            let violations = actor.watch_workspace();
            tokio::spawn(actor.run(commands, inbound, violations));
            Ok(record)
        }
        Err(failure) => {
            connection.close_stdin().await;
            let exit = process.stop(config.stop_grace).await;
            let mut error = failure.redacted(events.redactor());
            if error.reason == Reason::AgentExited {
                error.message = exit_message(&exit, &process.stderr_tail(), events.redactor());
            }
            pool.record_failure(&ticket.profile_id, error.reason, &error.message);
            let _ = events.emit(None, vec![exited(process.pid(), exit, "agent")]).await;
            fail_execution(&store, &mut record, &error, Some(exit), recovery).await;
            Err(error)
        }
    }
}

/// Records a launch that failed before the execution got a ready agent: `failed`, or
/// `lost` again for a failed recovery (it may be recovered later).
pub(crate) async fn fail_execution(
    store: &Arc<dyn Store>,
    record: &mut ExecutionRecord,
    error: &EngineError,
    exit: Option<ExitProof>,
    recovery: bool,
) {
    let from = ExecutionState::parse(&record.state).unwrap_or(ExecutionState::Starting);
    record.state = if recovery {
        ExecutionState::Lost
    } else {
        ExecutionState::Failed
    }
    .as_str()
    .into();
    record.failure_reason = Some(error.reason.as_str().into());
    record.failure_message = Some(error.message.clone());
    if let Some(exit) = exit {
        record.exit_code = exit.exit_code.map(i64::from);
        record.exit_signal = exit.signal.map(i64::from);
    }
    record.updated_at_ms = now_ms();
    match execution_row::save(store.as_ref(), from, record).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(execution_id = %record.id, "a failed launch was not recorded: the execution moved on")
        }
        Err(e) => tracing::error!(execution_id = %record.id, error = %e, "recording a failed execution failed"),
    }
}

pub(crate) fn exited(pid: u32, exit: ExitProof, initiated_by: &str) -> ActivityPayload {
    ActivityPayload::ProcessExited(ProcessExited {
        pid,
        exit_code: exit.exit_code,
        signal: exit.signal,
        initiated_by: initiated_by.into(),
    })
}

/// How an actor's loop ends.
enum Ending {
    Continue,
    Stop,
}

impl Actor {
    /// Applies the caller's model, parameters and mode one option at a time, each echo
    /// checked, and records what is in effect. On an agent without `configOptions` it
    /// falls back to `session/set_model` / `session/set_mode`, which echo nothing
    /// (recorded `verified: false`).
    async fn configure(&mut self, request: &ConfigRequest) -> Result<(), EngineError> {
        let applied = if self.config_options.as_array().is_some_and(|o| !o.is_empty()) {
            self.apply_steps(request.steps()).await
        } else {
            self.configure_legacy(request).await
        };
        let outcome = applied.map(|config| self.record_config(config));
        if !request.steps().is_empty() {
            self.emit_config().await?;
        }
        outcome
    }

    /// Under an agent profile: every approval policy presents the agent's permission
    /// requests (to a human, or answers them itself), so the agent must run in a mode in
    /// which it asks. The request's mode becomes the profile's first ask mode, or must be
    /// one of them, and the agent must advertise it; else the execution is refused rather
    /// than run unguarded. Cursor without a profile asks in each of its modes.
    fn require_ask_mode(&self, request: &mut ConfigRequest) -> Result<(), EngineError> {
        let Some(profile) = &self.agent_profile else {
            return Ok(());
        };
        let advertised = session_config::advertised_modes(&self.config_options, &self.modes);
        let refuse = |message: String| {
            EngineError::precondition(Reason::ApprovalModeUnavailable, message)
                .with("available_modes", advertised.join(","))
        };
        let Some(first) = profile.ask_modes.first() else {
            return Err(refuse(format!(
                "agent profile `{}` names no mode in which the agent asks before running tools (`ask_mode`), so the {} approval policy would not hold; the agent offers: {}",
                profile.name,
                self.policy.as_str(),
                advertised.join(", ")
            )));
        };
        let mode = request.mode.get_or_insert_with(|| first.clone()).clone();
        if !profile.ask_modes.contains(&mode) {
            return Err(refuse(format!(
                "mode `{mode}` is not one in which the agent asks (agent profile `{}`: {})",
                profile.name,
                profile.ask_modes.join(", ")
            ))
            .with("mode", mode));
        }
        if !advertised.contains(&mode) {
            return Err(refuse(format!(
                "the agent does not advertise its ask mode `{mode}` (it offers: {})",
                advertised.join(", ")
            ))
            .with("mode", mode));
        }
        Ok(())
    }

    /// `configId = value` for each step, in order, each echo checked; then every step
    /// again, so a later change cannot have silently undone an earlier one.
    async fn apply_steps(&mut self, steps: Vec<(String, String)>) -> Result<SessionConfig, EngineError> {
        let limit = self.config.handshake_timeout;
        for (config_id, value) in &steps {
            let options = session_config::parse_options(&self.config_options);
            session_config::check_offered(&options, config_id, value)?;
            let boolean = options
                .iter()
                .find(|o| o.id == *config_id)
                .is_some_and(|o| matches!(o.value, session_config::OptionValue::Boolean { .. }));
            let params = if boolean {
                json!({"sessionId": self.session_id, "configId": config_id, "type": "boolean", "value": value == "true"})
            } else {
                json!({"sessionId": self.session_id, "configId": config_id, "value": value})
            };
            let answered = handshake::timed(limit, self.connection.request("session/set_config_option", params))
                .await
                .map_err(|e| refused_change(e, config_id, value))?;
            if answered["configOptions"].is_array() {
                self.config_options = answered["configOptions"].clone();
            }
            let echoed = session_config::parse_options(&self.config_options);
            self.record_config(SessionConfig::from_options(&echoed));
            session_config::check_echo(&echoed, config_id, value)?;
        }
        let options = session_config::parse_options(&self.config_options);
        for (config_id, value) in &steps {
            session_config::check_echo(&options, config_id, value)?;
        }
        Ok(SessionConfig::from_options(&options))
    }

    async fn configure_legacy(&mut self, request: &ConfigRequest) -> Result<SessionConfig, EngineError> {
        let limit = self.config.handshake_timeout;
        let mut config = SessionConfig {
            model: self.legacy_models["currentModelId"].as_str().map(str::to_owned),
            ..SessionConfig::default()
        };
        if let Some(model_id) = session_config::legacy_model_id(&self.legacy_models, request)? {
            let params = json!({"sessionId": self.session_id, "modelId": model_id});
            handshake::timed(limit, self.connection.request("session/set_model", params))
                .await
                .map_err(|e| refused_change(e, "model", &model_id))?;
            config.model = request.model.clone();
            config.parameters = request.parameters.clone();
        }
        if let Some(mode) = &request.mode {
            let advertised = session_config::advertised_modes(&Value::Null, &self.modes);
            if !advertised.contains(mode) {
                let offered = if advertised.is_empty() {
                    "it offers no modes".to_owned()
                } else {
                    format!("it offers: {}", advertised.join(", "))
                };
                return Err(EngineError::precondition(
                    Reason::ModelUnavailable,
                    format!("the agent does not offer mode `{mode}` ({offered})"),
                )
                .with("config_id", "mode")
                .with("requested", mode.clone()));
            }
            let params = json!({"sessionId": self.session_id, "modeId": mode});
            handshake::timed(limit, self.connection.request("session/set_mode", params))
                .await
                .map_err(|e| refused_change(e, "mode", mode))?;
            config.mode = Some(mode.clone());
        }
        Ok(config)
    }

    /// `session.config.updated` with the agent's current options, through the same
    /// projection its own `config_option_update` gets.
    async fn emit_config(&mut self) -> Result<(), EngineError> {
        if !self.config_options.is_array() {
            return Ok(());
        }
        let update = json!({"sessionUpdate": "config_option_update", "configOptions": self.config_options});
        let payloads = self.session_normalizer.on_update(&update);
        let turn_id = self.turn.as_ref().map(|t| t.record.id.clone());
        self.events.emit(turn_id.as_deref(), payloads).await
    }

    /// `SetModel` / `SetMode` / `SetConfigOption`: between turns only (Cursor's model
    /// is process-global and a change mid-turn has no defined effect).
    async fn change_config(&mut self, steps: ConfigChange) -> Result<ExecutionRecord, EngineError> {
        if let Some(turn) = &self.turn {
            return Err(EngineError::precondition(
                Reason::TurnActive,
                format!(
                    "turn `{}` is running; change the configuration between turns",
                    turn.record.id
                ),
            )
            .with("turn_id", turn.record.id.clone()));
        }
        let mode = match &steps {
            ConfigChange::Request(request) => request.mode.clone(),
            ConfigChange::Option { config_id, value } => (config_id == "mode").then(|| value.clone()),
        };
        if let Some(mut request) = mode.map(|mode| ConfigRequest {
            mode: Some(mode),
            ..ConfigRequest::default()
        }) {
            // Never out of the mode in which the agent asks.
            self.require_ask_mode(&mut request)?;
        }
        let applied = match steps {
            ConfigChange::Request(request) => self.configure(&request).await,
            ConfigChange::Option { config_id, value } => {
                if self.config_options.as_array().is_none_or(|o| o.is_empty()) {
                    Err(EngineError::precondition(
                        Reason::ModelUnavailable,
                        "the agent has no configOptions (an older build): use SetModel or SetMode",
                    ))
                } else {
                    let applied = self.apply_steps(vec![(config_id, value)]).await;
                    let emitted = self.emit_config().await;
                    applied.and_then(|config| {
                        self.record_config(config);
                        emitted
                    })
                }
            }
        };
        // What the agent reports is recorded even when a change was refused half-way.
        self.save_record().await?;
        applied.map(|()| self.record.clone())
    }

    /// The model catalog: `cursor/list_available_models` (every model with its own
    /// parameters) from Cursor, else what `session/new` offered. A Cursor extension is
    /// never sent to an agent under a profile (one that never advertised it).
    async fn list_models(&self) -> Result<ModelCatalog, EngineError> {
        if self.agent_profile.is_some() {
            return Ok(ModelCatalog::from_session(&self.config_options, &self.legacy_models));
        }
        let limit = self.config.handshake_timeout;
        let call = self.connection.request("cursor/list_available_models", json!({}));
        match tokio::time::timeout(limit, call).await {
            Ok(Ok(result)) => Ok(ModelCatalog::from_list(&result)),
            Ok(Err(AcpError::Rpc(e))) if e.code == cursor_runner_acp::METHOD_NOT_FOUND => {
                Ok(ModelCatalog::from_session(&self.config_options, &self.legacy_models))
            }
            Ok(Err(e)) => Err(EngineError::new(
                ErrorKind::Unavailable,
                Reason::ProtocolError,
                e.to_string(),
            )),
            Err(_) => Err(EngineError::new(
                ErrorKind::Unavailable,
                Reason::AgentUnresponsive,
                format!("cursor/list_available_models got no answer within {limit:?}"),
            )),
        }
    }

    /// A launch that failed after the process was leased: stop it, record the exit
    /// proof, fail the execution.
    async fn fail_launch(mut self, error: EngineError, recovery: bool) -> EngineError {
        let error = error.redacted(self.events.redactor());
        if let Some(ticket) = &self.ticket {
            self.pool
                .record_failure(&ticket.profile_id, error.reason, &error.message);
        }
        self.connection.close_stdin().await;
        let exit = self.process.stop(self.config.stop_grace).await;
        let _ = self
            .events
            .emit(None, vec![exited(self.process.pid(), exit, "runner")])
            .await;
        fail_execution(&self.store, &mut self.record, &error, Some(exit), recovery).await;
        error
    }

    /// Records what is in effect: the agent's configuration and the session's MCP servers.
    fn record_config(&mut self, mut config: SessionConfig) {
        config.mcp_servers = self.mcp_servers.clone();
        self.record.session_config = Some(config.to_json());
    }

    /// The normalizer of one turn of this execution's session.
    fn turn_normalizer(&self, turn_id: &str) -> TurnNormalizer {
        let normalizer = TurnNormalizer::new(turn_id)
            .with_workspace(self.record.workspace.clone())
            .with_root_session(self.session_id.clone());
        match self.agent_profile {
            Some(_) => normalizer.for_another_agent(),
            None => normalizer,
        }
    }

    /// Starts watching the workspace for the life of the session; without a watcher
    /// (inotify unavailable) the admission checks still hold and a warning is logged.
    fn watch_workspace(&mut self) -> Option<mpsc::UnboundedReceiver<Violation>> {
        let watched = WorkspaceWatcher::global().and_then(|watcher| {
            watcher.watch(
                std::path::Path::new(&self.record.workspace),
                self.config.workspace_policy.clone(),
            )
        });
        match watched {
            Ok((guard, violations)) => {
                self._workspace_watch = Some(guard);
                Some(violations)
            }
            Err(e) => {
                tracing::warn!(execution_id = %self.record.id, error = %e, "continuous workspace protection is off");
                None
            }
        }
    }

    /// The workspace policy again, before every prompt: the watch narrows the race, this
    /// closes it for the next turn (a violation between turns, or one the watch missed).
    fn check_workspace(&self) -> Result<(), EngineError> {
        self.config
            .workspace_policy
            .check(std::path::Path::new(&self.record.workspace))
            .map_err(policy_refusal)
    }

    /// Configuration that would load code appeared in the workspace during the session.
    async fn on_workspace_violation(&mut self, violation: Violation) -> Result<Ending, EngineError> {
        let stop = self.config.on_workspace_violation == ViolationAction::StopTurn;
        let mut notice = ProviderNotice::warning(
            "workspace_policy_violation",
            NoticeScope::Environment,
            format!("{violation}{}", if stop { "; the turn is stopped" } else { "" }),
        );
        notice.user_actionable = true;
        let turn_id = self.turn.as_ref().map(|t| t.record.id.clone());
        self.events
            .emit(turn_id.as_deref(), vec![ActivityPayload::ProviderNotice(notice)])
            .await?;
        if stop
            && let Some(turn_id) = self
                .turn
                .as_ref()
                .filter(|t| t.cancel_deadline.is_none())
                .map(|t| t.record.id.clone())
        {
            self.cancel_turn_with(&turn_id, "workspace_policy").await?;
        }
        Ok(Ending::Continue)
    }

    async fn run(
        mut self,
        mut commands: mpsc::Receiver<(Command, tracing::Span)>,
        mut inbound: InboundStream,
        mut violations: Option<mpsc::UnboundedReceiver<Violation>>,
    ) {
        loop {
            let deadline = self.turn.as_ref().and_then(|t| t.cancel_deadline);
            let handoff = self
                .pending
                .values()
                .filter(|p| p.persisted.kind() != InteractionKind::Permission)
                .map(|p| p.handoff_at)
                .min();
            let drain_due = self.drain.as_ref().filter(|d| !d.cancelled).map(|d| d.deadline);
            let bound_due = self
                .turn
                .as_ref()
                .filter(|t| t.cancel_deadline.is_none())
                .and_then(|t| t.bound)
                .map(|(at, _)| at);
            // Silence while a human is being asked is not the agent hanging.
            let waiting_on_human = !self.pending.is_empty();
            let idle_due = self
                .turn
                .as_ref()
                .filter(|t| t.cancel_deadline.is_none() && !waiting_on_human)
                .zip(self.config.turn_idle_timeout)
                .map(|(t, idle)| t.last_activity + idle);
            // What the agent sends during a turn is handled inside the turn's span.
            let turn_span = self.turn.as_ref().map_or_else(tracing::Span::none, |t| t.span.clone());
            let ending = tokio::select! {
                Some((command, span)) = commands.recv() => self.on_command(command).instrument(span).await,
                () = sleep_until(drain_due) => self.on_drain_deadline().await,
                () = sleep_until(bound_due) => self.on_turn_bound().await,
                () = sleep_until(idle_due) => self.on_turn_idle().await,
                message = inbound.recv() => {
                    self.touch_turn();
                    match message {
                        Some(Inbound::Closed { .. }) | None => self.on_process_lost().instrument(turn_span.clone()).await,
                        Some(Inbound::Notification { method, params }) if method == "session/update" => {
                            self.on_updates(params, &mut inbound).instrument(turn_span.clone()).await
                        }
                        Some(message) => self.on_inbound(message).instrument(turn_span.clone()).await,
                    }
                },
                                () = sleep_until(deadline) => self.on_cancel_timeout().await,
                                () = sleep_until(handoff) => self.on_handoff_due().await,
                Some(violation) = next_violation(&mut violations) => self.on_workspace_violation(violation).await,
            };
            if waiting_on_human {
                self.touch_turn();
            }
            if self.events.is_fenced() {
                self.stop_fenced().await;
                break;
            }
            let ending = match ending {
                Ok(Ending::Continue) => self.close_if_drained().await,
                other => other,
            };
            match ending {
                Ok(Ending::Continue) => {}
                Ok(Ending::Stop) => break,
                Err(e) => {
                    self.fail(e).await;
                    break;
                }
            }
        }
        // Refuse what is still queued: the execution is over.
        if let Some((_, reply)) = self.queued_start.take() {
            let _ = reply.send(Err(EngineError::precondition(
                Reason::ExecutionNotReady,
                format!("execution `{}` is {}", self.record.id, self.record.state),
            )));
        }
        if let Some(drain) = self.drain.take() {
            for reply in drain.replies {
                let _ = reply.send(Ok(self.record.clone()));
            }
        }
        commands.close();
        while let Some((command, _)) = commands.recv().await {
            self.refuse(command);
        }
        self.release(inbound);
    }

    /// After the loop: a process the pool takes back serves another session; any other
    /// was stopped already, and its slot ends with its ticket.
    fn release(self, inbound: InboundStream) {
        let Some(ticket) = self.ticket else { return };
        if !self.reuse {
            return;
        }
        let warm = WarmProcess {
            process: self.process,
            connection: self.connection,
            inbound,
            timings: Default::default(),
            initialized: self.initialized,
            sessions_served: self.sessions_served,
            ticket,
        };
        if let Err(warm) = self.pool.give_back(warm) {
            // Draining began meanwhile: stop it off the actor.
            let grace = self.config.stop_grace;
            tokio::spawn(async move {
                let mut warm = *warm;
                warm.connection.close_stdin().await;
                warm.process.stop(grace).await;
            });
        }
    }

    fn refuse(&self, command: Command) {
        let error = || {
            EngineError::precondition(
                Reason::ExecutionNotReady,
                format!("execution `{}` is {}", self.record.id, self.record.state),
            )
            .with("state", self.record.state.clone())
        };
        match command {
            Command::StartTurn { reply, .. } => drop(reply.send(Err(error()))),
            Command::CancelTurn { reply, .. } => drop(reply.send(Err(error()))),
            Command::Answer { reply, .. } => drop(reply.send(Err(error()))),
            Command::Close { reply } | Command::Drain { reply, .. } => drop(reply.send(Ok(self.record.clone()))),
            Command::Configure { reply, .. } => drop(reply.send(Err(error()))),
            Command::ListModels { reply } => drop(reply.send(Err(error()))),
        }
    }

    async fn on_command(&mut self, command: Command) -> Result<Ending, EngineError> {
        tracing::debug!(execution_id = %self.record.id, command = command.name(), "command");
        match command {
            Command::StartTurn {
                prompt,
                replace_active: true,
                reply,
            } if self.turn.is_some() => self.replace_turn(prompt, reply).await?,
            Command::StartTurn { prompt, reply, .. } => {
                let result = self.start_turn(prompt).await;
                let _ = reply.send(result);
            }
            Command::CancelTurn { turn_id, reply } => {
                let result = self.cancel_turn(&turn_id).await;
                let _ = reply.send(result);
            }
            Command::Answer {
                record,
                etag,
                request_id,
                answer,
                reply,
            } => {
                let result = self.answer(*record, &etag, &request_id, answer).await;
                let _ = reply.send(result);
            }
            Command::Close { reply } => {
                let result = self.close().await;
                let _ = reply.send(result);
                return Ok(Ending::Stop);
            }
            Command::Configure { change, reply } => {
                let result = self.change_config(change).await;
                let _ = reply.send(result);
            }
            Command::ListModels { reply } => {
                let _ = reply.send(self.list_models().await);
            }
            Command::Drain { deadline, reply } => match self.drain.as_mut() {
                Some(drain) => {
                    drain.deadline = drain.deadline.min(deadline);
                    drain.replies.push(reply);
                }
                None => {
                    self.drain = Some(Drain {
                        deadline,
                        cancelled: false,
                        replies: vec![reply],
                    });
                }
            },
        }
        Ok(Ending::Continue)
    }

    /// The drain deadline passed with a turn still running: cancel it (its pending
    /// interactions settle by the usual rules, reason `service_draining`).
    async fn on_drain_deadline(&mut self) -> Result<Ending, EngineError> {
        if let Some(drain) = self.drain.as_mut() {
            drain.cancelled = true;
        }
        let Some(turn) = self.turn.as_mut().filter(|t| t.cancel_deadline.is_none()) else {
            return Ok(Ending::Continue);
        };
        turn.interrupted_by = Some(TurnFailureReason::ServiceDraining);
        let turn_id = turn.record.id.clone();
        self.cancel_turn_with(&turn_id, "service_draining").await?;
        Ok(Ending::Continue)
    }

    /// The running turn hit its deadline or the execution's active-time budget: it is
    /// cancelled through the normal path and settles `interrupted` with that reason.
    async fn on_turn_bound(&mut self) -> Result<Ending, EngineError> {
        let Some(turn) = self.turn.as_mut().filter(|t| t.cancel_deadline.is_none()) else {
            return Ok(Ending::Continue);
        };
        let Some((_, reason)) = turn.bound.take() else {
            return Ok(Ending::Continue);
        };
        turn.interrupted_by = Some(reason);
        let turn_id = turn.record.id.clone();
        self.cancel_turn_with(&turn_id, reason.as_str()).await?;
        Ok(Ending::Continue)
    }

    /// The agent sent nothing for the idle timeout and nothing waits on a human: the
    /// turn is cancelled through the normal path and settles `interrupted` (`agent_idle`);
    /// an agent too hung to settle it is stopped by the cancel ladder.
    async fn on_turn_idle(&mut self) -> Result<Ending, EngineError> {
        let Some(turn) = self.turn.as_mut().filter(|t| t.cancel_deadline.is_none()) else {
            return Ok(Ending::Continue);
        };
        turn.interrupted_by = Some(TurnFailureReason::AgentIdle);
        let turn_id = turn.record.id.clone();
        self.cancel_turn_with(&turn_id, TurnFailureReason::AgentIdle.as_str())
            .await?;
        Ok(Ending::Continue)
    }

    fn touch_turn(&mut self) {
        if let Some(turn) = self.turn.as_mut() {
            turn.last_activity = Instant::now();
        }
    }

    /// Draining and no turn runs (or waits to): close now.
    async fn close_if_drained(&mut self) -> Result<Ending, EngineError> {
        if self.drain.is_none() || self.turn.is_some() || self.queued_start.is_some() {
            return Ok(Ending::Continue);
        }
        self.close().await?;
        Ok(Ending::Stop)
    }

    /// `replace_active`: cancel the running turn (it settles `interrupted`, reason
    /// `replaced_by_new_turn`) and start the new prompt once it has settled.
    async fn replace_turn(&mut self, prompt: Prompt, reply: Reply<TurnRecord>) -> Result<(), EngineError> {
        if self.queued_start.is_some() {
            let _ = reply.send(Err(EngineError::precondition(
                Reason::TurnActive,
                "another turn is already waiting to replace the running one",
            )));
            return Ok(());
        }
        // Refused before the running turn is touched: it goes on.
        if let Err(refusal) = self.check_workspace() {
            let _ = reply.send(Err(refusal));
            return Ok(());
        }
        let Some(turn) = self.turn.as_mut() else {
            return Ok(());
        };
        turn.interrupted_by = Some(TurnFailureReason::ReplacedByNewTurn);
        let (turn_id, cancelling) = (turn.record.id.clone(), turn.cancel_deadline.is_some());
        self.queued_start = Some((prompt, reply));
        if !cancelling {
            self.cancel_turn_with(&turn_id, "replaced_by_new_turn").await?;
        }
        Ok(())
    }

    async fn start_turn(&mut self, prompt: Prompt) -> Result<TurnRecord, EngineError> {
        prompt.check_supported(self.prompt_capabilities)?;
        if self.drain.is_some() {
            return Err(EngineError::new(
                ErrorKind::Unavailable,
                Reason::Draining,
                "the service is draining: it starts no new turns",
            ));
        }
        if let Some(turn) = &self.turn {
            return Err(EngineError::precondition(
                Reason::TurnActive,
                format!("turn `{}` is still running", turn.record.id),
            )
            .with("turn_id", turn.record.id.clone()));
        }
        self.check_workspace()?;
        let bound = ExecutionLimits::of(&self.record).next_turn(&self.record)?;
        let turn_number = self.record.turn_count + 1;
        let record = TurnRecord {
            id: uuid::Uuid::now_v7().to_string(),
            execution_id: self.record.id.clone(),
            tenant_id: self.record.tenant_id.clone(),
            generation: self.record.generation,
            turn_number,
            state: TurnState::Running.as_str().into(),
            stop_reason: None,
            failure_reason: None,
            failure_message: None,
            started_at_ms: now_ms(),
            ended_at_ms: None,
            credential_name: self.record.credential_name.clone(),
            session_config: self.record.session_config.clone(),
            usage: None,
        };
        self.store.insert_turn(&record).await?;
        self.record.turn_count = turn_number;
        self.record.active_turn_id = Some(record.id.clone());
        self.save_record().await?;
        self.events
            .emit(
                Some(&record.id),
                vec![ActivityPayload::TurnStarted(TurnStarted {
                    turn_id: record.id.clone(),
                    turn_number,
                    prompt_chars: prompt.text_chars(),
                })],
            )
            .await?;
        let span = tracing::info_span!(
            "turn",
            execution_id = %self.record.id,
            generation = self.record.generation,
            turn_id = %record.id,
            turn_number,
        );
        let mut request = serde_json::to_value(schema::PromptRequest::new(self.session_id.clone(), prompt.to_acp()))
            .map_err(|e| EngineError::internal(e.to_string()))?;
        // ACP reserves `_meta.traceparent` for W3C trace context: the agent's turn can
        // continue the caller's trace.
        let trace_context = crate::tracing_context::w3c_fields(&span);
        if !trace_context.is_empty() {
            request["_meta"] = json!(trace_context);
        }
        // The prompt's response comes back in wire order, after the updates before it.
        let prompt_request_id = self.connection.start_request("session/prompt", request).await.ok();
        self.turn = Some(ActiveTurn {
            normalizer: self.turn_normalizer(&record.id),
            record: record.clone(),
            prompt_request_id,
            interrupted_by: None,
            cancel_deadline: None,
            bound: bound.map(|(limit, reason)| (Instant::now() + limit, reason)),
            last_activity: Instant::now(),
            span,
        });
        Ok(record)
    }

    async fn cancel_turn(&mut self, turn_id: &str) -> Result<TurnRecord, EngineError> {
        self.cancel_turn_with(turn_id, "turn_cancelled").await
    }

    /// `session/cancel`, then every pending interaction of the turn is answered
    /// `cancelled` and recorded with `reason`; the turn settles when the prompt returns.
    async fn cancel_turn_with(&mut self, turn_id: &str, reason: &str) -> Result<TurnRecord, EngineError> {
        let Some(turn) = self.turn.as_mut().filter(|t| t.record.id == turn_id) else {
            return Err(EngineError::precondition(
                Reason::NoActiveTurn,
                format!("turn `{turn_id}` is not running"),
            ));
        };
        if turn.cancel_deadline.is_none() {
            turn.cancel_deadline = Some(Instant::now() + self.config.cancel_grace);
            let notify = schema::CancelNotification::new(self.session_id.clone());
            if let Err(e) = self.connection.notify("session/cancel", notify).await {
                tracing::warn!(execution_id = %self.record.id, error = %e, "sending session/cancel failed");
            }
            self.settle_pending(reason).await?;
        }
        self.turn
            .as_ref()
            .map(|t| t.record.clone())
            .ok_or_else(|| EngineError::internal("a cancelled turn stays active until it settles"))
    }

    async fn on_inbound(&mut self, message: Inbound) -> Result<Ending, EngineError> {
        match message {
            Inbound::Request(request) => self.on_agent_request(request).await?,
            Inbound::Notification { method, params } => match method.as_str() {
                "session/update" => self.on_session_update(&params).await?,
                cursor::UPDATE_TODOS | cursor::TASK | cursor::GENERATE_IMAGE => {
                    self.on_extension(&method, &params).await?
                }
                _ => {}
            },
            Inbound::Invalid { reason } => {
                self.notice(
                    "protocol_invalid_frame",
                    format!("skipped a malformed line from the agent: {reason}"),
                )
                .await?;
            }
            Inbound::Oversized { bytes } => {
                self.notice(
                    "protocol_oversized_frame",
                    format!("skipped a {bytes}-byte line over the frame bound"),
                )
                .await?;
            }
            Inbound::Response { id, result } => {
                return self.on_prompt_result(id, result.map_err(AcpError::Rpc)).await;
            }
            Inbound::UnmatchedResponse { id } => {
                self.notice(
                    "protocol_unmatched_response",
                    format!("a response to unknown request id {id}"),
                )
                .await?;
            }
            Inbound::Closed { .. } => return self.on_process_lost().await,
        }
        Ok(Ending::Continue)
    }

    async fn on_extension(&mut self, method: &str, params: &Value) -> Result<(), EngineError> {
        if method == cursor::GENERATE_IMAGE {
            return self.on_generated_image(params).await;
        }
        let (turn_id, payloads) = match self.turn.as_mut() {
            Some(turn) => (
                Some(turn.record.id.clone()),
                turn.normalizer.on_extension(method, params),
            ),
            None => (None, self.session_normalizer.on_extension(method, params)),
        };
        self.events.emit(turn_id.as_deref(), payloads).await
    }

    /// `cursor/generate_image`: every path is checked on disk (inside the workspace by
    /// real path, a regular file, no symlink) before an event refers to it.
    async fn on_generated_image(&mut self, params: &Value) -> Result<(), EngineError> {
        let workspace = std::path::Path::new(&self.record.workspace);
        let mut refused = 0;
        let mut check = |path: &str| match workspace_file(workspace, path) {
            Ok(relative) => Some(relative),
            Err(_) => {
                refused += 1;
                None
            }
        };
        let reference = params["filePath"].as_str().and_then(&mut check);
        let viewed: Vec<String> = params["referenceImagePaths"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter_map(&mut check)
            .collect();
        let tool_call_id = params["toolCallId"].as_str().unwrap_or("unknown");
        let description = params["description"].as_str().unwrap_or_default();
        let payloads = generated_image(tool_call_id, description, reference, viewed, refused);
        let turn_id = self.turn.as_ref().map(|t| t.record.id.clone());
        self.events.emit(turn_id.as_deref(), payloads).await
    }

    async fn on_session_update(&mut self, params: &Value) -> Result<(), EngineError> {
        let payloads = self.normalize_update(params);
        let turn_id = self.turn.as_ref().map(|t| t.record.id.clone());
        self.events.emit(turn_id.as_deref(), payloads).await
    }

    /// A run of `session/update`s already waiting in the inbound queue is normalized
    /// into one outbox append (one commit) instead of one per update; the first other
    /// message ends the run and is handled after it, so wire order is kept.
    async fn on_updates(&mut self, first: Value, inbound: &mut InboundStream) -> Result<Ending, EngineError> {
        let mut payloads = self.normalize_update(&first);
        let mut next = None;
        for _ in 1..MAX_UPDATES_PER_APPEND {
            match inbound.try_recv() {
                Ok(Inbound::Notification { method, params }) if method == "session/update" => {
                    payloads.extend(self.normalize_update(&params));
                }
                Ok(other) => {
                    next = Some(other);
                    break;
                }
                Err(_) => break,
            }
        }
        let turn_id = self.turn.as_ref().map(|t| t.record.id.clone());
        self.events.emit(turn_id.as_deref(), coalesce_deltas(payloads)).await?;
        match next {
            None => Ok(Ending::Continue),
            Some(Inbound::Closed { .. }) => self.on_process_lost().await,
            Some(message) => self.on_inbound(message).await,
        }
    }

    /// The events of one `session/update`, for the running turn or the session. The
    /// normalizer decides whose it is: the root session, a child it knows (spawned from
    /// its parent in this turn), or nobody's (suppressed with a notice).
    fn normalize_update(&mut self, params: &Value) -> Vec<ActivityPayload> {
        if let (Some(metrics), Some((kind, fields))) = (self.events.metrics(), unconsumed_fields(&params["update"])) {
            for field in fields {
                metrics.unconsumed_field(kind, field);
            }
        }
        match self.turn.as_mut() {
            Some(turn) => turn.normalizer.on_session_update(params),
            None => self.session_normalizer.on_session_update(params),
        }
    }

    async fn on_agent_request(&mut self, request: AgentRequest) -> Result<(), EngineError> {
        match request.method.as_str() {
            cursor::ASK_QUESTION => {
                let parsed = serde_json::from_value::<AskQuestionParams>(request.params.clone())
                    .map_err(|e| RequestRefused(format!("malformed cursor/ask_question: {e}")))
                    .and_then(QuestionRequest::from_native)
                    .map(PersistedRequest::Question);
                self.open_interaction(request, parsed).await
            }
            cursor::CREATE_PLAN => {
                let parsed = serde_json::from_value::<CreatePlanParams>(request.params.clone())
                    .map_err(|e| RequestRefused(format!("malformed cursor/create_plan: {e}")))
                    .and_then(PlanRequest::from_native)
                    .map(PersistedRequest::Plan);
                self.open_interaction(request, parsed).await
            }
            "session/request_permission" => {
                let parsed = PermissionRequest::from_native(&request.params, self.policy).and_then(|p| {
                    let child_session = self
                        .turn
                        .as_ref()
                        .is_some_and(|t| t.normalizer.child_for(Some(&p.session_id), None).is_some());
                    if p.session_id == self.session_id || child_session {
                        Ok(PersistedRequest::Permission(p))
                    } else {
                        Err(RequestRefused(format!(
                            "a permission for foreign session `{}`",
                            p.session_id
                        )))
                    }
                });
                self.open_interaction(request, parsed).await
            }
            // Fire-and-forget extensions: acknowledged at once, never waiting on anyone.
            cursor::UPDATE_TODOS | cursor::TASK | cursor::GENERATE_IMAGE => {
                let (method, params) = (request.method.clone(), request.params.clone());
                respond(request, Ok(json!({}))).await;
                self.on_extension(&method, &params).await
            }
            method => {
                let error = RpcError::method_not_found(method);
                respond(request, Err(error)).await;
                Ok(())
            }
        }
    }

    /// Validates a human-facing request, persists it bound to the running turn, and
    /// only then exposes it. A request that cannot be accepted is refused on the wire
    /// at once (`cancelled`) with a notice; nothing is half-recorded.
    async fn open_interaction(
        &mut self,
        request: AgentRequest,
        parsed: Result<PersistedRequest, RequestRefused>,
    ) -> Result<(), EngineError> {
        let method = request.method.clone();
        let persisted = match (parsed, self.turn.as_ref()) {
            (Ok(persisted), Some(turn)) if turn.cancel_deadline.is_none() => persisted,
            (Ok(_), _) => {
                respond(request, Ok(cancelled_result())).await;
                return self
                    .notice(
                        "interaction_outside_turn",
                        format!("`{method}` arrived with no running turn; answered `cancelled`"),
                    )
                    .await;
            }
            (Err(why), _) => {
                respond(request, Ok(cancelled_result())).await;
                return self
                    .notice(
                        "interaction_refused",
                        format!("`{method}` refused and answered `cancelled`: {why}"),
                    )
                    .await;
            }
        };
        let turn = self
            .turn
            .as_ref()
            .map(|t| t.record.clone())
            .ok_or_else(|| EngineError::internal("no turn"))?;
        let active = self.turn.as_ref().map(|t| &t.normalizer);
        let tool_call_known = persisted
            .tool_call_id()
            .map(|id| active.is_some_and(|n| n.knows_tool_call(id)));
        // A request from a child agent (a permission on its session, or any request whose
        // tool call is the child's) is attributed to that child.
        let session_id = match &persisted {
            PersistedRequest::Permission(p) => Some(p.session_id.as_str()),
            _ => None,
        };
        let child =
            active.and_then(|n| n.child_for(session_id.filter(|s| *s != self.session_id), persisted.tool_call_id()));
        let durable = match persisted.to_durable_json().map(|text| with_child(text, child.as_ref())) {
            Ok(text) => text,
            Err(why) => {
                respond(request, Ok(cancelled_result())).await;
                return self
                    .notice(
                        "interaction_refused",
                        format!("`{method}` refused and answered `cancelled`: {why}"),
                    )
                    .await;
            }
        };
        // The row keeps the agent's words without the secrets it was handed; answers are
        // mapped through `persisted`, which stays in memory as the agent sent it.
        let durable = self.events.redactor().redact_json_text(durable);
        let native_request_id = serde_json::to_string(&request.id).unwrap_or_default();
        let native_request_id = self.events.redactor().redact_text(&native_request_id).0;
        let id = uuid::Uuid::now_v7().to_string();
        let now = now_ms();
        let record = InteractionRecord {
            etag: etag(&id, self.record.generation, &turn.id),
            id,
            execution_id: self.record.id.clone(),
            tenant_id: self.record.tenant_id.clone(),
            generation: self.record.generation,
            turn_id: turn.id.clone(),
            native_request_id,
            kind: kind_name(persisted.kind()).into(),
            state: InteractionState::Pending.as_str().into(),
            request: durable,
            outcome: None,
            answer_request_id: None,
            answer_fingerprint: None,
            reason: None,
            delivery: None,
            replay_allowed: false,
            created_at_ms: now,
            updated_at_ms: now,
        };
        // Persist before expose: the row commits before the event is appended.
        failpoint("interaction_before_persist").await;
        match self.store.insert_interaction(&record).await {
            Ok(()) => {}
            // The agent reused a request id of this process: never answer two requests
            // through one identity.
            Err(StoreError::Duplicate) => {
                respond(request, Ok(cancelled_result())).await;
                return self
                    .notice(
                        "duplicate_request_id",
                        format!(
                            "`{method}` reused request id {} of this process; answered `cancelled`",
                            record.native_request_id
                        ),
                    )
                    .await;
            }
            Err(e) => {
                respond(request, Ok(cancelled_result())).await;
                return Err(e.into());
            }
        }
        self.events
            .emit(
                Some(&turn.id),
                vec![ActivityPayload::RuntimeRequestCreated(RuntimeRequestCreated {
                    interaction_id: record.id.clone(),
                    kind: persisted.kind(),
                    etag: record.etag.clone(),
                    turn_id: turn.id.clone(),
                    request: serde_json::from_str(&record.request).unwrap_or_default(),
                    tool_call_known,
                    child_id: child.map(|c| c.child_id),
                })],
            )
            .await?;
        let denial = match (&persisted, self.policy) {
            (PersistedRequest::Permission(p), ApprovalPolicy::DenyAll) => Some(p.policy_denial()),
            _ => None,
        };
        let pending = PendingInteraction {
            record,
            request,
            persisted,
            handoff_at: Instant::now() + self.wait_limit,
        };
        match denial {
            // The policy answers at once, without a human; the tool must not run.
            Some(outcome) => {
                let span = deliver_span(&pending, "policy");
                self.deliver(pending, outcome, None, "policy").instrument(span).await?;
            }
            None => {
                self.pending.insert(pending.record.id.clone(), pending);
            }
        }
        Ok(())
    }

    async fn answer(
        &mut self,
        record: InteractionRecord,
        etag: &str,
        request_id: &str,
        answer: InteractionAnswer,
    ) -> Result<InteractionRecord, EngineError> {
        let Some(pending) = self.pending.get(&record.id) else {
            let current = self
                .store
                .get_interaction(&record.tenant_id, &record.id)
                .await?
                .unwrap_or(record);
            return Err(not_pending(&current));
        };
        if etag != pending.record.etag {
            self.events.refused_stale_etag();
            return Err(EngineError::precondition(
                Reason::StaleEtag,
                "the etag is not the interaction's current one",
            ));
        }
        let outcome = pending.persisted.outcome_for(&answer)?;
        let pending = self
            .pending
            .remove(&record.id)
            .ok_or_else(|| EngineError::internal("pending entry vanished"))?;
        let span = deliver_span(&pending, "human");
        self.deliver(pending, outcome, Some((request_id, answer.fingerprint())), "human")
            .instrument(span)
            .await
    }

    /// Records the answer, writes it to the agent, and records `delivered` only once
    /// the write is flushed. If the write fails the process is gone: the interaction
    /// expires with `delivery: unknown`, never claimed delivered.
    async fn deliver(
        &mut self,
        pending: PendingInteraction,
        outcome: Value,
        answer: Option<(&str, String)>,
        answered_by: &str,
    ) -> Result<InteractionRecord, EngineError> {
        let arrived = Instant::now();
        let mut answered = pending.record.clone();
        answered.state = InteractionState::Answered.as_str().into();
        answered.outcome = Some(outcome.to_string());
        answered.answer_request_id = answer.as_ref().map(|(id, _)| (*id).to_owned());
        answered.answer_fingerprint = answer.map(|(_, fingerprint)| fingerprint);
        answered.reason = (answered_by == "policy").then(|| format!("approval_policy_{}", self.policy.as_str()));
        answered.updated_at_ms = now_ms();
        if !interaction::transition(self.store.as_ref(), InteractionState::Pending, &answered).await? {
            let current = self
                .store
                .get_interaction(&answered.tenant_id, &answered.id)
                .await?
                .unwrap_or(answered);
            if current.state == InteractionState::Pending.as_str() {
                // Still pending, so the compare-and-set failed on the execution's
                // generation: another lease owns it now. Nothing reaches this agent.
                self.events.refused_by_fence("answer");
                return Err(StoreError::Fenced.into());
            }
            return Err(not_pending(&current));
        }
        failpoint("answer_recorded_before_pipe_write").await;
        let written = pending.request.respond(Ok(outcome.clone())).await;
        if let (Ok(_), Some(metrics)) = (&written, self.events.metrics()) {
            metrics.answer_delivered_after(arrived.elapsed());
        }
        if written.is_ok() {
            failpoint("answer_written_before_delivered").await;
        }
        let mut settled = answered.clone();
        settled.updated_at_ms = now_ms();
        if written.is_err() {
            settled.state = InteractionState::Expired.as_str().into();
            settled.delivery = Some("unknown".into());
            settled.reason = Some("provider_process_lost".into());
            interaction::transition(self.store.as_ref(), InteractionState::Answered, &settled).await?;
            self.emit_ended(&settled, true).await?;
            return Err(not_pending(&settled));
        }
        settled.state = InteractionState::Delivered.as_str().into();
        settled.delivery = Some("pipe_written".into());
        interaction::transition(self.store.as_ref(), InteractionState::Answered, &settled).await?;
        self.events
            .emit(
                Some(&settled.turn_id),
                vec![ActivityPayload::RuntimeRequestResolved(RuntimeRequestResolved {
                    interaction_id: settled.id.clone(),
                    kind: kind_of(&settled.kind),
                    turn_id: settled.turn_id.clone(),
                    outcome,
                    delivery: "pipe_written".into(),
                    answered_by: answered_by.into(),
                })],
            )
            .await?;
        self.observe_wait(&settled);
        Ok(settled)
    }

    /// Answers every pending interaction `cancelled` on the wire and records it by its
    /// kind's rule: a permission `cancelled`; a question or plan `expired` (not
    /// replayable, full request kept for a durable hand-off).
    async fn settle_pending(&mut self, reason: &str) -> Result<(), EngineError> {
        // In the order they were asked (ids are time-ordered UUIDv7).
        let mut ids: Vec<String> = self.pending.keys().cloned().collect();
        ids.sort_unstable();
        for id in ids {
            self.settle_one(&id, reason).await?;
        }
        Ok(())
    }

    async fn settle_one(&mut self, id: &str, reason: &str) -> Result<(), EngineError> {
        let Some(p) = self.pending.remove(id) else {
            return Ok(());
        };
        let written = p.request.respond(Ok(cancelled_result())).await;
        let mut record = p.record;
        record.outcome = Some(cancelled_result().to_string());
        let delivery = if written.is_ok() { "pipe_written" } else { "not_sent" };
        self.end_pending(record, p.persisted.state_when_turn_ends(), reason, delivery)
            .await
    }

    /// Records a pending interaction's end (compare-and-set from `pending`; never
    /// replayable) and exposes it with the full request.
    async fn end_pending(
        &mut self,
        mut record: InteractionRecord,
        state: InteractionState,
        reason: &str,
        delivery: &str,
    ) -> Result<(), EngineError> {
        record.state = state.as_str().into();
        record.reason = Some(reason.into());
        record.delivery = Some(delivery.into());
        record.replay_allowed = false;
        record.updated_at_ms = now_ms();
        if interaction::transition(self.store.as_ref(), InteractionState::Pending, &record).await? {
            self.emit_ended(&record, true).await?;
        }
        Ok(())
    }

    /// Hands off every question or plan that has waited past the execution's limit:
    /// Cursor never times them out, so they would pin the process forever. They expire
    /// (`durable_handoff`), the agent gets `cancelled`, and the turn is cancelled so it
    /// settles; the control plane asks the human durably and continues with a new turn.
    async fn on_handoff_due(&mut self) -> Result<Ending, EngineError> {
        let now = Instant::now();
        let due: Vec<String> = self
            .pending
            .values()
            .filter(|p| p.handoff_at <= now)
            .map(|p| p.record.id.clone())
            .collect();
        for id in due {
            self.settle_one(&id, "durable_handoff").await?;
        }
        if let Some(turn_id) = self
            .turn
            .as_ref()
            .filter(|t| t.cancel_deadline.is_none())
            .map(|t| t.record.id.clone())
        {
            self.cancel_turn_with(&turn_id, "durable_handoff").await?;
        }
        Ok(Ending::Continue)
    }

    async fn emit_ended(&mut self, record: &InteractionRecord, with_request: bool) -> Result<(), EngineError> {
        let ended = RuntimeRequestEnded {
            interaction_id: record.id.clone(),
            kind: kind_of(&record.kind),
            turn_id: record.turn_id.clone(),
            reason: record.reason.clone().unwrap_or_default(),
            replay_allowed: false,
            delivery: record.delivery.clone().unwrap_or_default(),
            request: with_request
                .then(|| serde_json::from_str(&record.request).ok())
                .flatten(),
        };
        let payload = if record.state == InteractionState::Cancelled.as_str() {
            ActivityPayload::RuntimeRequestCancelled(ended)
        } else {
            ActivityPayload::RuntimeRequestExpired(ended)
        };
        self.events.emit(Some(&record.turn_id), vec![payload]).await?;
        self.observe_wait(record);
        Ok(())
    }

    /// How long an interaction that just ended had been pending.
    fn observe_wait(&self, record: &InteractionRecord) {
        if let (Some(metrics), Some(state)) = (self.events.metrics(), InteractionState::parse(&record.state)) {
            let waited = Duration::from_millis((now_ms() - record.created_at_ms).max(0) as u64);
            metrics.interaction_waited(kind_of(&record.kind), state.as_str(), waited);
        }
    }

    async fn on_prompt_result(
        &mut self,
        request_id: i64,
        result: Result<Value, AcpError>,
    ) -> Result<Ending, EngineError> {
        if self.turn.as_ref().and_then(|t| t.prompt_request_id) != Some(request_id) {
            return Ok(Ending::Continue);
        }
        let settlement = match result {
            Ok(value) => match value.get("stopReason").and_then(Value::as_str) {
                Some("cancelled") if let Some(reason) = self.turn.as_ref().and_then(|t| t.interrupted_by) => (
                    TurnState::Interrupted,
                    Some("cancelled".to_owned()),
                    Some(reason),
                    Some(interruption_message(reason).to_owned()),
                ),
                Some("cancelled") => (TurnState::Cancelled, Some("cancelled".to_owned()), None, None),
                Some(reason) => (TurnState::Completed, Some(reason.to_owned()), None, None),
                None => (
                    TurnState::Failed,
                    None,
                    Some(TurnFailureReason::ProtocolError),
                    Some("the prompt result has no stopReason".to_owned()),
                ),
            },
            Err(AcpError::Rpc(e)) if e.code == cursor_runner_acp::AUTH_REQUIRED => (
                TurnState::Failed,
                None,
                Some(TurnFailureReason::AuthRequired),
                Some(e.to_string()),
            ),
            Err(AcpError::Rpc(e)) => (
                TurnState::Failed,
                None,
                Some(TurnFailureReason::ProtocolError),
                Some(e.to_string()),
            ),
            // The connection is gone: the process-loss path settles the turn with the exit status.
            Err(_) => return Ok(Ending::Continue),
        };
        let (state, stop_reason, failure, message) = settlement;
        self.settle_turn(state, stop_reason, failure, message).await?;
        if let Some((prompt, reply)) = self.queued_start.take() {
            let started = self.start_turn(prompt).await;
            let _ = reply.send(started);
        }
        Ok(Ending::Continue)
    }

    async fn settle_turn(
        &mut self,
        state: TurnState,
        stop_reason: Option<String>,
        failure: Option<TurnFailureReason>,
        message: Option<String>,
    ) -> Result<(), EngineError> {
        let reason = if state == TurnState::Cancelled {
            "turn_cancelled"
        } else {
            "turn_settled"
        };
        self.settle_pending(reason).await?;
        let Some(mut turn) = self.turn.take() else {
            return Ok(());
        };
        let turn_id = turn.record.id.clone();
        let mut payloads = turn.normalizer.finish(match state {
            TurnState::Completed | TurnState::Running => TurnEnding::Completed,
            TurnState::Cancelled => TurnEnding::Cancelled,
            TurnState::Interrupted => TurnEnding::Interrupted,
            TurnState::Failed => TurnEnding::Failed,
        });
        turn.record.state = state.as_str().into();
        turn.record.stop_reason = stop_reason.clone();
        turn.record.failure_reason = failure.map(|f| f.as_str().to_owned());
        // The agent's words may be in it (a prompt error, a stderr tail).
        let message = message.map(|m| self.events.redactor().redact_text(&m).0);
        turn.record.failure_message = message.clone();
        let ended = now_ms();
        turn.record.ended_at_ms = Some(ended);
        turn.record.usage = attempts::usage_column(payloads.iter().find_map(|p| match p {
            ActivityPayload::UsageReported(usage) => Some(usage),
            _ => None,
        }));
        self.store.settle_turn(&turn.record).await?;
        let ran = (ended - turn.record.started_at_ms).max(0);
        self.record.active_ms += ran;
        if let Some(metrics) = self.events.metrics() {
            metrics.turn_settled_after(state.as_str(), Duration::from_millis(ran as u64));
        }
        let settled = TurnSettled {
            turn_id: turn_id.clone(),
            stop_reason,
            failure_reason: failure,
            message,
        };
        payloads.push(match state {
            TurnState::Completed | TurnState::Running => ActivityPayload::TurnCompleted(settled),
            TurnState::Cancelled => ActivityPayload::TurnCancelled(settled),
            TurnState::Interrupted => ActivityPayload::TurnInterrupted(settled),
            TurnState::Failed => ActivityPayload::TurnFailed(settled),
        });
        // The execution row first: a client reacting to the terminal event reads the
        // execution as the turn left it (active time, no active turn).
        self.record.active_turn_id = None;
        self.save_record().await?;
        self.events.emit(Some(&turn_id), payloads).await?;
        Ok(())
    }

    async fn on_cancel_timeout(&mut self) -> Result<Ending, EngineError> {
        self.stop_process("runner").await?;
        // The execution is marked lost before the turn's terminal event, so a client
        // reacting to that event already reads the final state.
        self.mark_lost("cancel_timeout").await?;
        // The turn reports why it was cancelled (a deadline, a budget, a drain, a
        // replacement) when the service did it; the stop ladder is how it ended.
        let cause = self.turn.as_ref().and_then(|t| t.interrupted_by);
        let ladder = format!(
            "the agent did not settle within {:?} of the cancel; it was stopped",
            self.config.cancel_grace
        );
        let message = match cause {
            Some(cause) => format!("{}; {ladder}", interruption_message(cause)),
            None => ladder,
        };
        self.settle_turn(
            TurnState::Interrupted,
            None,
            Some(cause.unwrap_or(TurnFailureReason::CancelTimeout)),
            Some(message),
        )
        .await?;
        Ok(Ending::Stop)
    }

    async fn on_process_lost(&mut self) -> Result<Ending, EngineError> {
        let exit = match self.process.wait_for(self.config.stop_grace).await {
            Some(exit) => exit,
            None => self.process.stop(self.config.stop_grace).await,
        };
        let message = exit_message(&exit, &self.process.stderr_tail(), self.events.redactor());
        if let Some(ticket) = &self.ticket {
            self.pool
                .record_failure(&ticket.profile_id, Reason::AgentExited, &message);
        }
        self.record.exit_code = exit.exit_code.map(i64::from);
        self.record.exit_signal = exit.signal.map(i64::from);
        self.events
            .emit(None, vec![exited(self.process.pid(), exit, "agent")])
            .await?;
        self.settle_pending_lost().await?;
        self.record.failure_message = Some(message.clone());
        self.mark_lost(Reason::AgentExited.as_str()).await?;
        if self.turn.is_some() {
            self.settle_turn(
                TurnState::Failed,
                None,
                Some(TurnFailureReason::AgentExited),
                Some(message),
            )
            .await?;
        }
        Ok(Ending::Stop)
    }

    /// The actor cannot go on (the store stayed unavailable past the outage limit, or
    /// refused a write for good): the agent is stopped and everything live settles as for
    /// a lost process — pending interactions expire, the running turn fails, the execution
    /// is `lost` — so no turn is left `running` without an owner. After a store outage
    /// those writes wait until the store is back.
    async fn fail(&mut self, error: EngineError) {
        let error = error.redacted(self.events.redactor());
        tracing::error!(execution_id = %self.record.id, error = %error, "execution actor failed; stopping its agent");
        // First, so the agent never waits on a store that may be gone for long.
        let exit = self.stop_agent().await;
        if error.reason == Reason::StoreUnavailable {
            self.store = self.store.with_patience(Patience::UntilBack);
            if let Err(e) = self.events.resume_with(self.store.clone()).await {
                tracing::error!(execution_id = %self.record.id, error = %e, "could not read the outbox's head back");
            }
        }
        let failure = match error.reason {
            Reason::StoreUnavailable => TurnFailureReason::StoreUnavailable,
            Reason::ProtocolError => TurnFailureReason::ProtocolError,
            _ => TurnFailureReason::ProviderLost,
        };
        if let Err(e) = self.settle_failed(exit, &error, failure).await {
            tracing::error!(execution_id = %self.record.id, error = %e, "could not record the execution's failure");
        }
    }

    async fn settle_failed(
        &mut self,
        exit: ExitProof,
        error: &EngineError,
        failure: TurnFailureReason,
    ) -> Result<(), EngineError> {
        self.events
            .emit(None, vec![exited(self.process.pid(), exit, "runner")])
            .await?;
        self.settle_pending_lost().await?;
        self.record.failure_message = Some(error.message.clone());
        self.mark_lost(error.reason.as_str()).await?;
        if self.turn.is_some() {
            self.settle_turn(TurnState::Failed, None, Some(failure), Some(error.message.clone()))
                .await?;
        }
        Ok(())
    }

    /// The process is gone: pending interactions expire and are never re-sent.
    async fn settle_pending_lost(&mut self) -> Result<(), EngineError> {
        let mut pending: Vec<PendingInteraction> = self.pending.drain().map(|(_, p)| p).collect();
        pending.sort_unstable_by(|a, b| a.record.id.cmp(&b.record.id));
        for p in pending {
            self.end_pending(p.record, InteractionState::Expired, "provider_process_lost", "not_sent")
                .await?;
        }
        Ok(())
    }

    async fn close(&mut self) -> Result<ExecutionRecord, EngineError> {
        self.record.state = ExecutionState::Closing.as_str().into();
        self.save_record().await?;
        if self.turn.is_some() {
            let notify = schema::CancelNotification::new(self.session_id.clone());
            let _ = self.connection.notify("session/cancel", notify).await;
        }
        self.settle_pending("turn_cancelled").await?;
        // A process that ends its session cleanly may serve the profile again.
        self.reuse = self.turn.is_none()
            && self
                .ticket
                .as_ref()
                .is_some_and(|t| self.pool.accepts_return(&t.profile_id, self.sessions_served));
        if self.reuse {
            self.events
                .emit(
                    None,
                    vec![ActivityPayload::ProcessReleased(ProcessReleased {
                        pid: self.process.pid(),
                        sessions_served: self.sessions_served + 1,
                    })],
                )
                .await?;
        } else {
            let exit = self.stop_process("runner").await?;
            self.record.exit_code = exit.exit_code.map(i64::from);
            self.record.exit_signal = exit.signal.map(i64::from);
        }
        if self.turn.is_some() {
            self.settle_turn(
                TurnState::Interrupted,
                None,
                None,
                Some("the execution was closed".into()),
            )
            .await?;
        }
        self.record.state = ExecutionState::Closed.as_str().into();
        self.save_record().await?;
        Ok(self.record.clone())
    }

    /// The stop ladder: close stdin, SIGTERM the group, grace, SIGKILL, reap.
    async fn stop_process(&mut self, initiated_by: &str) -> Result<ExitProof, EngineError> {
        let exit = self.stop_agent().await;
        self.events
            .emit(None, vec![exited(self.process.pid(), exit, initiated_by)])
            .await?;
        Ok(exit)
    }

    /// The stop ladder, recording nothing.
    async fn stop_agent(&mut self) -> ExitProof {
        self.process.census_descendants();
        self.connection.close_stdin().await;
        self.process.stop(self.config.stop_grace).await
    }

    async fn mark_lost(&mut self, reason: &str) -> Result<(), EngineError> {
        self.record.state = ExecutionState::Lost.as_str().into();
        self.record.failure_reason = Some(reason.to_owned());
        self.save_record().await
    }

    async fn notice(&mut self, category: &str, summary: impl Into<String>) -> Result<(), EngineError> {
        let turn_id = self.turn.as_ref().map(|t| t.record.id.clone());
        let notice = ProviderNotice::warning(category, NoticeScope::Turn, summary);
        self.events
            .emit(turn_id.as_deref(), vec![ActivityPayload::ProviderNotice(notice)])
            .await
    }

    /// Writes the execution row, fenced by its generation.
    async fn save_record(&mut self) -> Result<(), EngineError> {
        self.record.updated_at_ms = now_ms();
        if let Some(message) = &mut self.record.failure_message {
            *message = self.events.redactor().redact_text(message).0;
        }
        if !execution_row::save(self.store.as_ref(), self.stored_state, &self.record).await? {
            self.events.refused_by_fence("execution");
            return Err(StoreError::Fenced.into());
        }
        self.stored_state = execution_row::check_transition(self.stored_state, &self.record)?;
        Ok(())
    }

    /// The execution's generation moved on: this process no longer serves it. Stop it
    /// without writing anything more for the execution (every write would be refused).
    async fn stop_fenced(&mut self) {
        tracing::warn!(
            execution_id = %self.record.id,
            generation = self.record.generation,
            "the execution's generation moved on; stopping this agent"
        );
        self.process.census_descendants();
        self.connection.close_stdin().await;
        self.process.stop(self.config.stop_grace).await;
    }
}

/// A change of the session's configuration.
pub(crate) enum ConfigChange {
    /// Model (+ parameters) and/or mode.
    Request(ConfigRequest),
    /// One option by its id (`SetConfigOption`).
    Option { config_id: String, value: String },
}

/// The agent's models and their parameters (`ListModels`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelCatalog {
    pub models: Vec<ModelEntry>,
    /// `cursor/list_available_models`, `session/new configOptions` or `session/new models`.
    pub source: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelEntry {
    pub model_id: String,
    pub name: String,
    /// Known for every model from `cursor/list_available_models`; else only for the
    /// current model.
    pub parameters: Vec<session_config::ConfigOption>,
}

impl ModelCatalog {
    fn from_list(result: &Value) -> Self {
        let models = result["models"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| {
                Some(ModelEntry {
                    model_id: m["value"].as_str()?.to_owned(),
                    name: m["name"].as_str().unwrap_or_default().to_owned(),
                    parameters: session_config::parse_options(&m["configOptions"]),
                })
            })
            .collect();
        Self {
            models,
            source: "cursor/list_available_models",
        }
    }

    fn from_session(config_options: &Value, legacy_models: &Value) -> Self {
        let options = config_options.as_array().cloned().unwrap_or_default();
        if let Some(model) = options.iter().find(|o| o["id"] == "model") {
            let current = model["currentValue"].as_str().unwrap_or_default();
            let parameters: Vec<_> = session_config::parse_options(config_options)
                .into_iter()
                .filter(|o| o.id != "model" && o.id != "mode")
                .collect();
            let models = model["options"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|entry| match entry["options"].as_array() {
                    Some(group) => group.iter().collect::<Vec<_>>(),
                    None => vec![entry],
                })
                .filter_map(|entry| {
                    let model_id = entry["value"].as_str()?.to_owned();
                    Some(ModelEntry {
                        parameters: if model_id == current {
                            parameters.clone()
                        } else {
                            Vec::new()
                        },
                        name: entry["name"].as_str().unwrap_or_default().to_owned(),
                        model_id,
                    })
                })
                .collect();
            return Self {
                models,
                source: "session/new configOptions",
            };
        }
        let models = legacy_models["availableModels"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| {
                Some(ModelEntry {
                    model_id: m["modelId"].as_str()?.to_owned(),
                    name: m["name"].as_str().unwrap_or_default().to_owned(),
                    parameters: Vec::new(),
                })
            })
            .collect();
        Self {
            models,
            source: "session/new models",
        }
    }
}

/// A configuration call the agent refused: an unknown value is `MODEL_UNAVAILABLE`;
/// a dead or silent agent stays what it is.
fn refused_change(error: EngineError, config_id: &str, value: &str) -> EngineError {
    if error.reason == Reason::ProtocolError {
        EngineError::precondition(
            Reason::ModelUnavailable,
            format!("the agent refused `{config_id}` = `{value}`: {}", error.message),
        )
        .with("config_id", config_id)
        .with("requested", value)
    } else {
        error
    }
}

/// The durable request JSON, with the child agent it came from (if any) under `child`.
fn with_child(durable: String, child: Option<&ChildRef>) -> String {
    let Some(child) = child else { return durable };
    match serde_json::from_str::<Value>(&durable) {
        Ok(Value::Object(mut map)) => {
            map.insert("child".into(), json!(child));
            Value::Object(map).to_string()
        }
        _ => durable,
    }
}

/// Answers an agent request; a write failure means the process is gone, which the
/// reader reports separately.
async fn respond(request: AgentRequest, result: Result<Value, RpcError>) {
    if let Err(e) = request.respond(result).await {
        tracing::debug!(error = %e, "answering an agent request failed");
    }
}

fn kind_name(kind: InteractionKind) -> &'static str {
    match kind {
        InteractionKind::Question => "question",
        InteractionKind::Plan => "plan",
        InteractionKind::Permission => "permission",
    }
}

/// Why the service cancelled a turn, in words.
fn interruption_message(reason: TurnFailureReason) -> &'static str {
    match reason {
        TurnFailureReason::ServiceDraining => "cancelled at the service's drain deadline",
        TurnFailureReason::DeadlineExceeded => "cancelled at the turn's deadline",
        TurnFailureReason::BudgetExhausted => "cancelled: the execution's active time is spent",
        TurnFailureReason::AgentIdle => "cancelled: the agent sent nothing for the idle timeout",
        _ => "replaced by a new turn (replace_active)",
    }
}

/// The span of one answer's way to the agent.
fn deliver_span(pending: &PendingInteraction, answered_by: &str) -> tracing::Span {
    tracing::info_span!(
        "interaction.deliver",
        interaction_id = %pending.record.id,
        kind = %pending.record.kind,
        generation = pending.record.generation,
        turn_id = %pending.record.turn_id,
        answered_by,
    )
}

/// Test-only windows: with the `failpoints` feature, a point named in
/// `CURSOR_RUNNER_FAILPOINT` announces itself on stderr and then holds the calling task
/// for good (so a test can SIGKILL the service exactly there), or for
/// `CURSOR_RUNNER_FAILPOINT_PAUSE_MS` if that is set (so a test can act inside the
/// window and watch the service go on). Without the feature it compiles to nothing.
async fn failpoint(name: &str) {
    #[cfg(feature = "failpoints")]
    if std::env::var("CURSOR_RUNNER_FAILPOINT").as_deref() == Ok(name) {
        eprintln!("failpoint reached: {name}");
        match std::env::var("CURSOR_RUNNER_FAILPOINT_PAUSE_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
        {
            Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
            None => std::future::pending().await,
        }
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}

/// An opaque token naming the interaction's fence (execution generation and turn).
fn etag(interaction_id: &str, generation: i64, turn_id: &str) -> String {
    let digest = Sha256::digest(format!("{interaction_id}|{generation}|{turn_id}").as_bytes());
    hex::encode(&digest[..12])
}

async fn next_violation(violations: &mut Option<mpsc::UnboundedReceiver<Violation>>) -> Option<Violation> {
    match violations {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
