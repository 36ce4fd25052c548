//! One slot's process: starting it (launch + `initialize`) and watching it while it
//! is idle. Nothing here knows the pool's bookkeeping; the pool acts on what these
//! functions return.

use std::time::Duration;

use tokio::time::Instant;

use std::sync::Arc;

use cursor_runner_acp::{AcpConnection, AcpError, Inbound, InboundStream, RpcError, WireTap};
use cursor_runner_activity::Redactor;
use cursor_runner_supervisor::agent_users::AgentLease;
use cursor_runner_supervisor::{AgentProcess, ExitProof, LaunchError, LaunchSpec};
use serde_json::json;
use tokio::sync::oneshot;

use crate::config::{LaunchAs, LaunchSettings, launch_secrets};
use crate::handshake;
use crate::ticket::SlotTicket;
use crate::wire_capture::{MAX_WIRE_CAPTURE_BYTES, WireCapture};
use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};

/// The method of the idle liveness probe. ACP reserves `_`-prefixed names for
/// extensions and requires an agent that does not know one to answer `-32601`, so
/// any answer — even that error — proves the agent still reads and writes.
pub const IDLE_PROBE_METHOD: &str = "_cursor_runner/ping";

/// How long starting the process took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StartTimings {
    pub spawn: Duration,
    pub initialize: Duration,
}

/// A started, `initialize`d agent process with no session yet.
pub(crate) struct StartedProcess {
    pub process: AgentProcess,
    pub connection: AcpConnection,
    pub inbound: InboundStream,
    pub timings: StartTimings,
    /// What `initialize` answered (the agent's capabilities).
    pub initialized: serde_json::Value,
}

/// A process that started but failed before it was ready: what the exit proof needs.
#[derive(Debug, Clone)]
pub struct FailedProcess {
    pub pid: u32,
    pub exit: ExitProof,
    /// What was launched: the program, and the distribution label events name it by.
    pub program: String,
    pub distribution: String,
}

/// Why a start failed, typed, with the process's exit proof when there was one.
#[derive(Debug)]
pub struct StartFailure {
    pub error: EngineError,
    pub process: Option<FailedProcess>,
    /// When the start failed after `initialize` (at `authenticate`): what the agent said
    /// about itself, which the failed execution still records.
    pub initialized: Option<FailedHandshake>,
}

/// A start that failed after `initialize` answered.
#[derive(Debug, Clone)]
pub struct FailedHandshake {
    pub slot_id: String,
    /// The operator's agent profile it ran under (`None`: `--agent-command`).
    pub agent_profile: Option<String>,
    /// What `initialize` answered.
    pub initialized: serde_json::Value,
}

/// Launches the agent in its private home with at most one bound credential (and,
/// under an agent profile, that profile's command and environment) and runs
/// `initialize` — then the profile's `authenticate`, when the agent offers it — under
/// the handshake timeout. On failure the process is stopped and reaped before this returns.
pub(crate) async fn start_process(
    config: &LaunchSettings,
    ticket: &mut SlotTicket,
    launch_as: LaunchAs,
) -> Result<StartedProcess, StartFailure> {
    let LaunchAs { credential, agent } = launch_as;
    let redactor = Redactor::new(launch_secrets(credential.as_ref(), agent.as_deref()));
    ticket.agent = agent.as_ref().map(|a| a.profile.clone());
    let slot_id = ticket.slot_id.as_str();
    let identity = ticket.identity.as_ref().map(AgentLease::identity);
    if config.agent_users.is_some() && identity.is_none() {
        // Never fall back to the service's own uid.
        return Err(StartFailure {
            error: EngineError::new(
                ErrorKind::Unavailable,
                Reason::AgentLaunchFailed,
                "every provisioned agent user is in use (cursor-runner setup-agent-users --count N)",
            ),
            process: None,
            initialized: None,
        });
    }
    let (command, extra_env) = match &agent {
        Some(agent) => (agent.profile.command.clone(), agent.env.clone()),
        None => (config.agent_command.clone(), Vec::new()),
    };
    let authenticate = agent
        .as_ref()
        .and_then(|a| a.profile.authenticate.as_ref())
        .map(|a| a.method_id.clone());
    let credential_variable = credential.as_ref().map(|c| c.name.as_str().to_owned());
    let spec = LaunchSpec {
        command,
        private_home: ticket.home.clone(),
        credential,
        extra_env,
        identity,
    };
    let began = Instant::now();
    let spawned = match &config.guardian {
        Some(guardian) => guardian.spawn(&spec, slot_id, 0),
        None => AgentProcess::spawn(&spec),
    };
    let (mut process, stdin, stdout) = spawned.map_err(|e| StartFailure {
        error: match e {
            LaunchError::DistributionUnverified(_) => EngineError::new(
                ErrorKind::FailedPrecondition,
                Reason::DistributionUnverified,
                e.to_string(),
            ),
            _ => EngineError::new(ErrorKind::Unavailable, Reason::AgentLaunchFailed, e.to_string()),
        },
        process: None,
        initialized: None,
    })?;
    let spawn = began.elapsed();
    // From the first byte: `initialize` is the evidence that matters most for a new build,
    // and a start that fails keeps its traffic in `slot-<id>.ndjson`.
    ticket.capture = config.wire_capture_dir.as_ref().and_then(|dir| {
        WireCapture::for_slot(dir, slot_id, redactor.clone(), MAX_WIRE_CAPTURE_BYTES)
            .inspect_err(|e| tracing::warn!(slot_id, error = %e, "cannot open the wire capture"))
            .ok()
            .map(Arc::new)
    });
    let tap = ticket.capture.clone().map(|c| c as Arc<dyn WireTap>);
    let (connection, inbound) = AcpConnection::spawn_tapped(stdin, stdout, tap);
    let limit = config.handshake_timeout;
    let mut reported = None;
    let handshake = async {
        let initialized = handshake::initialize(&connection, limit).await?;
        reported = Some(initialized.clone());
        let named = handshake::named_method(&initialized, authenticate.as_deref(), credential_variable.as_deref());
        if let Some(method_id) = &named {
            handshake::authenticate(&connection, &initialized, method_id, limit).await?;
        }
        Ok::<_, EngineError>(initialized)
    };
    match handshake.await {
        Ok(initialized) => Ok(StartedProcess {
            process,
            connection,
            inbound,
            timings: StartTimings {
                spawn,
                initialize: began.elapsed() - spawn,
            },
            initialized,
        }),
        Err(mut error) => {
            connection.close_stdin().await;
            let exit = process.stop(config.stop_grace).await;
            if error.reason == Reason::AgentExited {
                error.message = exit_message(&exit, &process.stderr_tail(), &redactor);
            }
            Err(StartFailure {
                error: error.redacted(&redactor),
                process: Some(FailedProcess {
                    pid: process.pid(),
                    exit,
                    program: spec.command.program.display().to_string(),
                    distribution: spec.command.distribution_label(),
                }),
                initialized: reported.map(|initialized| FailedHandshake {
                    slot_id: ticket.slot_id.clone(),
                    agent_profile: ticket.agent.as_ref().map(|a| a.name.clone()),
                    initialized,
                }),
            })
        }
    }
}

/// The exit status and stderr tail, for a failure message; the tail is the agent's own
/// output, so the secrets it was handed are redacted from it.
pub fn exit_message(exit: &ExitProof, stderr_tail: &str, redactor: &Redactor) -> String {
    let status = match (exit.exit_code, exit.signal) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => "unknown status".into(),
    };
    let (tail, _) = redactor.redact_text(stderr_tail.trim());
    if tail.is_empty() {
        format!("the agent exited ({status})")
    } else {
        format!("the agent exited ({status}); stderr tail: {tail}")
    }
}

/// How an idle slot stopped being idle.
pub(crate) enum IdleEnd {
    /// Handed to a lease.
    HandedOff,
    /// Stopped on purpose: its TTL passed, it was evicted, or the pool drains.
    Recycled,
    /// It exited by itself (or closed its stdout) while idle.
    Died { message: String },
    /// It did not answer the liveness probe in time; it was stopped.
    Unresponsive,
}

/// What an idle watch needs to know.
pub(crate) struct IdleRules {
    pub recycle_at: Instant,
    pub probe_interval: Option<Duration>,
    pub probe_timeout: Duration,
    pub stop_grace: Duration,
    /// The profile's credential, kept out of what the idle agent's death reports.
    pub redactor: Redactor,
}

/// A process with no session, waiting for a lease.
pub(crate) struct IdleProcess {
    pub process: AgentProcess,
    pub connection: AcpConnection,
    pub inbound: InboundStream,
}

/// The channel a lease sends to take an idle process (with what travels along).
pub(crate) type Handoff<T> = oneshot::Sender<oneshot::Sender<(IdleProcess, T)>>;

/// Owns an idle process (and `along`, which goes wherever it goes) until a lease takes
/// both through the hand-off channel, the pool lets go of that channel (recycle), its
/// TTL passes, it dies, or it stops answering the probe. Unless handed off, the process
/// is stopped and reaped before this returns, and `along` comes back.
pub(crate) async fn watch_idle<T>(
    mut idle: IdleProcess,
    along: T,
    mut handoff: oneshot::Receiver<oneshot::Sender<(IdleProcess, T)>>,
    rules: IdleRules,
) -> (IdleEnd, Option<T>) {
    let mut next_probe = rules.probe_interval.map(|interval| Instant::now() + interval);
    let mut along = Some(along);
    let ending = loop {
        let probe_due = next_probe;
        tokio::select! {
            taken = &mut handoff => match taken {
                Ok(reply) => {
                    let bundle = (idle, along.take().expect("sent once"));
                    match reply.send(bundle) {
                        Ok(()) => return (IdleEnd::HandedOff, None),
                        // The lease gave up waiting; the process was never used.
                        Err((returned, returned_along)) => {
                            idle = returned;
                            along = Some(returned_along);
                            break IdleEnd::Recycled;
                        }
                    }
                }
                Err(_) => break IdleEnd::Recycled,
            },
            message = idle.inbound.recv() => match message {
                None | Some(Inbound::Closed { .. }) => {
                    let exit = match idle.process.wait_for(rules.stop_grace).await {
                        Some(exit) => exit,
                        None => idle.process.stop(rules.stop_grace).await,
                    };
                    let message = exit_message(&exit, &idle.process.stderr_tail(), &rules.redactor);
                    return (IdleEnd::Died { message }, along);
                }
                // Nothing may be asked of a client with no session.
                Some(Inbound::Request(request)) => {
                    let refusal = RpcError::new(cursor_runner_acp::METHOD_NOT_FOUND, "no session is open");
                    let _ = request.respond(Err(refusal)).await;
                }
                Some(_) => {}
            },
            () = tokio::time::sleep_until(rules.recycle_at) => break IdleEnd::Recycled,
            () = sleep_until(probe_due) => {
                let answered = tokio::time::timeout(
                    rules.probe_timeout,
                    idle.connection.request(IDLE_PROBE_METHOD, json!({})),
                )
                .await;
                match answered {
                    Ok(Ok(_)) | Ok(Err(AcpError::Rpc(_))) => {
                        next_probe = rules.probe_interval.map(|interval| Instant::now() + interval);
                    }
                    Ok(Err(_)) | Err(_) => break IdleEnd::Unresponsive,
                }
            }
        }
    };
    idle.process.census_descendants();
    idle.connection.close_stdin().await;
    idle.process.stop(rules.stop_grace).await;
    (ending, along)
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
