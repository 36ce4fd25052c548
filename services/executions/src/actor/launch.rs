//! Binding a leased process to its execution: the session opened (or loaded) and configured before the actor runs.

use std::sync::Arc;
use std::time::Duration;

use cursor_runner_activity::*;
use cursor_runner_store::{ExecutionRecord, Store, now_ms};
use cursor_runner_supervisor::ExitProof;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::answerable::Answerable;
use crate::config::EngineConfig;
use crate::events::EventWriter;
use crate::execution_row;
use crate::handshake::{self, SessionStart};
use crate::machine::drain::Drain;
use crate::machine::turn::Admission;
use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};
use cursor_runner_domain::lease::LeaseInfo;
use cursor_runner_domain::mcp::McpServer;
use cursor_runner_domain::prompt::PromptCapabilities;
use cursor_runner_domain::session_config::ConfigRequest;
use cursor_runner_domain::state::ExecutionState;
use cursor_runner_pool::handshake::with_auth_methods;
use cursor_runner_pool::{Pool, WarmProcess, exit_message};

use super::data::*;

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
    /// Where the actor lists the interactions it holds pending.
    pub answerable: Answerable,
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
        answerable,
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
    let began = Instant::now();
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
                .map_err(|e| with_auth_methods(e, &initialized)),
            None,
        ),
        (SessionStart::Load { session_id, recovery }, None) => {
            match handshake::load_session(&connection, &mut inbound, session_id, workspace, &mcp, policy, limit).await {
                Ok((opened, replayed)) => (
                    Ok(opened),
                    Some(ActivityPayload::SessionLoaded(SessionLoaded {
                        session_id: session_id.clone(),
                        recovery: *recovery,
                        generation: record.generation.get(),
                        replayed_updates_suppressed: replayed,
                    })),
                ),
                Err(e) => (Err(e), None),
            }
        }
    };
    lease.session_new_us = Some(cursor_runner_domain::lease::micros(began.elapsed()));
    // What the agent reported of itself is its words: stored redacted.
    lease.agent = Some(
        events
            .redactor()
            .redacted(cursor_runner_domain::lease::AgentReport::new(
                &initialized,
                opened.as_ref().ok().map(|o| (&o.config_options, &o.modes, &o.models)),
                ticket.agent.is_some(),
            )),
    );
    // A session id is the agent's word that must be kept as it is (a load names it), so
    // one that holds a secret the runner handed the agent cannot be stored at all.
    let opened = opened.and_then(|opened| {
        if events.redactor().appears_in(opened.session_id.as_bytes()) {
            Err(EngineError::new(
                ErrorKind::Unavailable,
                Reason::ProtocolError,
                "the agent's session id holds a secret the runner handed it; it cannot be stored",
            ))
        } else {
            Ok(opened)
        }
    });
    record.lease = Some(lease);
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
                stored_state: record.state,
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
                pending: PendingInteractions::new(answerable),
                policy: record.approval_policy,
                wait_limit: Duration::from_millis(record.interaction_wait_limit_ms.max(0) as u64),
                _workspace_watch: None,
                admission: Admission::default(),
                queued_reply: None,
                reuse: false,
                drain: Drain::default(),
                drain_replies: Vec::new(),
                checkpoint_upload: None,
            };
            // Under an agent profile, the mode that makes the agent ask (every approval
            // policy needs it to), then the caller's model, parameters and mode before any
            // prompt, each echo checked.
            if let Err(error) = actor.require_ask_mode(&mut session_request) {
                return Err(actor.fail_launch(error, recovery).await);
            }
            if let Err(error) = actor.configure(&session_request, actor.config.handshake_timeout).await {
                return Err(actor.fail_launch(error, recovery).await);
            }
            actor.record.state = ExecutionState::Ready;
            actor.save_record().await?;
            // Portable from its first moment: a replica that never ran the session can
            // load or recover it once this returns.
            actor.checkpoint().await?;
            let _ = actor.checkpoints_stored().await;
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
    let from = record.state;
    record.state = if recovery {
        ExecutionState::Lost
    } else {
        ExecutionState::Failed
    };
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
