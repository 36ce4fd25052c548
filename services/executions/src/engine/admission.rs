//! Admission: `CreateExecution` validated, reserved from the pool and launched; a recorded
//! session loaded, or a lost execution recovered, through the same launch ladder.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use cursor_runner_activity::ActivityPayload;
use cursor_runner_store::{ExecutionId, ExecutionRecord, Generation, now_ms};
use cursor_runner_supervisor::BoundCredential;

use crate::credential::{CredentialBinding, redactor_for};
use cursor_runner_activity::Redactor;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::actor::{self};
use crate::events::EventWriter;
use crate::execution_row;
use crate::handshake::SessionStart;
use crate::limits::ExecutionLimits;
use crate::policy::policy_refusal;
use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};
use cursor_runner_domain::interaction::ApprovalPolicy;
use cursor_runner_domain::lease::{LeaseInfo, micros};
use cursor_runner_domain::mcp::McpServer;
use cursor_runner_domain::session_config::{ConfigRequest, SessionConfig};
use cursor_runner_domain::state::ExecutionState;
use cursor_runner_pool::agent_profile::ResolvedProfile;
use cursor_runner_pool::{LaunchAs, MAX_LEASE_WAIT, Reservation};

use super::data::*;

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

impl Engine {
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
        self.idempotent_record(meta, "CreateExecution", move || async move {
            engine.launch_execution(&tenant_id, admitted).await
        })
        .await
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
            .ok_or_else(|| cursor_runner_pool::agent_profile::unknown(name))?;
        profiles.get(name)?.resolve().map(Some)
    }

    /// Launches an admitted execution; one that loads a recorded session holds the
    /// session's claim until it has the session or failed.
    async fn launch_execution(
        self: &Arc<Self>,
        tenant_id: &str,
        admitted: Admitted,
    ) -> Result<ExecutionRecord, EngineError> {
        let Some(session_id) = admitted.load_session_id.clone() else {
            return self.launch(tenant_id, admitted).await;
        };
        let claim = self.claim_session(tenant_id, &session_id).await?;
        let launched = self.launch(tenant_id, admitted).await;
        claim.release().await;
        launched
    }

    async fn launch(self: &Arc<Self>, tenant_id: &str, admitted: Admitted) -> Result<ExecutionRecord, EngineError> {
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
            id: uuid::Uuid::now_v7().to_string().into(),
            tenant_id: tenant_id.to_owned(),
            state: ExecutionState::Starting,
            // The first lease; each later lease (recovery) advances it.
            generation: Generation::FIRST,
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
            approval_policy: policy,
            interaction_wait_limit_ms: i64::try_from(wait_limit.as_millis()).unwrap_or(i64::MAX),
            lease: None,
            session_config: None,
            credential_name,
            limits,
            active_ms: 0,
        };
        self.execution_store().insert_execution(&record).await?;
        let span = tracing::info_span!(
            "execution.start",
            execution_id = %record.id,
            generation = record.generation.get(),
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

    /// The home of the tenant's recorded session (claimed by the caller, so no live
    /// execution has it), after checking that loading it keeps its identity: the same
    /// workspace, and the recorded model, parameters and mode (adopted when the request
    /// names none).
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
        let mismatch = |field: &str, detail: String| {
            EngineError::precondition(Reason::SessionIdentityMismatch, detail).with("field", field)
        };
        if recorded.workspace != workspace {
            return Err(mismatch(
                "workspace",
                format!("session `{session_id}` was recorded in another workspace"),
            ));
        }
        let identity = recorded.session_config.clone().unwrap_or_default();
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
        self.session_home(&recorded, session_id).await
    }

    /// `RecoverExecution`: after its agent died, a new process — under a new generation,
    /// in the session's home — loads the recorded session with its recorded model,
    /// parameters and mode. Pending interactions of the dead process stay expired.
    pub async fn recover_execution(
        self: &Arc<Self>,
        meta: RequestMeta,
        execution_id: &ExecutionId,
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
        let engine = self.clone();
        let id = execution_id.to_owned();
        self.idempotent_record(meta, "RecoverExecution", move || async move {
            let launch_as = LaunchAs {
                credential,
                agent: agent.map(Arc::new),
            };
            engine.recover(&tenant_id, &id, launch_as).await
        })
        .await
    }

    async fn recover(
        self: &Arc<Self>,
        tenant_id: &str,
        execution_id: &ExecutionId,
        launch_as: LaunchAs,
    ) -> Result<ExecutionRecord, EngineError> {
        let record = self.get_execution(tenant_id, execution_id).await?;
        let (ExecutionState::Lost, Some(session_id)) = (record.state, record.session_id.clone()) else {
            return Err(EngineError::precondition(
                Reason::ExecutionNotRecoverable,
                format!(
                    "execution `{}` is {} (recovery needs a lost agent's session)",
                    record.id, record.state
                ),
            )
            .with("state", record.state.as_str()));
        };
        let claim = self.claim_session(tenant_id, &session_id).await?;
        let recovered = self.recover_claimed(tenant_id, record, session_id, launch_as).await;
        claim.release().await;
        recovered
    }

    /// [`Self::recover`] once the session's claim is held.
    async fn recover_claimed(
        self: &Arc<Self>,
        tenant_id: &str,
        mut record: ExecutionRecord,
        session_id: String,
        launch_as: LaunchAs,
    ) -> Result<ExecutionRecord, EngineError> {
        self.config
            .workspace_policy
            .check(std::path::Path::new(&record.workspace))
            .map_err(policy_refusal)?;
        let mut session = ConfigRequest::default();
        let identity = record.session_config.clone().unwrap_or_default();
        adopt_identity(&mut session, &identity)
            .map_err(|_| EngineError::internal("an empty request adopts any identity"))?;
        let mcp_servers = self.config.mcp_allowlist.select(&identity.mcp_servers)?;
        // The credential presented again is the one later turns are attributed to.
        record.credential_name = launch_as.credential.as_ref().map(|c| c.name.as_str().to_owned());
        let home = self.session_home(&record, &session_id).await?;
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
        record.generation = record.generation.next();
        let recorded = record.state;
        record.state = ExecutionState::Starting;
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
            generation = record.generation.get(),
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
            .with_heads(&self.heads)
            .with_metrics(self.metrics.clone())
            .with_redactor(redactor.clone());
        let recovery = matches!(start, SessionStart::Load { recovery: true, .. });
        let (warm, is_warm) = match reservation {
            Reservation::Warm(warm) => (*warm, true),
            Reservation::Cold(cold) => match cold.start().await {
                Ok(warm) => (warm, false),
                Err(failure) => {
                    if let Some(failed) = &failure.initialized {
                        record.lease = Some(crate::handshake::lease_of_failed_handshake(failed));
                    }
                    let mut exit = None;
                    if let Some(process) = failure.process {
                        let _ = events
                            .emit(
                                None,
                                vec![
                                    ActivityPayload::ProcessSpawned(cursor_runner_activity::ProcessSpawned {
                                        pid: process.pid,
                                        distribution: process.distribution,
                                        program: process.program,
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
            replica: Some(self.replica_name().to_owned()),
            agent_profile: warm.ticket.agent.as_ref().map(|a| a.name.clone()),
            // Once the session is open (`actor::launch`).
            agent: None,
            unknown: Default::default(),
        };
        let (commands_tx, commands_rx) = mpsc::channel(64);
        {
            let mut executions = self.executions.lock();
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
            answerable: self.answerable.clone(),
        })
        .await
        // Launch errors may carry the agent's words (its refusal, its stderr).
        .map_err(|e| e.redacted(&redactor))
        .inspect_err(|e| self.metrics.launch_refused(e.reason))
    }
}

/// The agent profile a recorded execution's process ran under (its lease says).
pub(super) fn recorded_agent_profile(record: &ExecutionRecord) -> Option<String> {
    record.lease.as_ref().and_then(|l| l.agent_profile.clone())
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
