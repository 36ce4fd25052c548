//! The actor's state, the commands it takes and how its loop ends.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cursor_runner_acp::{AcpConnection, AgentRequest, RpcError};
use cursor_runner_activity::*;
use cursor_runner_store::{ExecutionRecord, InteractionId, InteractionRecord, Store, TurnRecord};
use cursor_runner_supervisor::workspace_watch::WatchGuard;
use cursor_runner_supervisor::{AgentProcess, ExitProof};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::answerable::Answerable;
use crate::call_key::CallKey;
use crate::config::EngineConfig;
use crate::events::EventWriter;
use crate::machine::drain::Drain;
use crate::machine::interaction::Interaction;
use crate::machine::turn::{Admission, Turn};
use crate::model_catalog::ModelCatalog;
use cursor_runner_domain::error::EngineError;
use cursor_runner_domain::interaction::{ApprovalPolicy, InteractionAnswer};
use cursor_runner_domain::prompt::{Prompt, PromptCapabilities};
use cursor_runner_domain::session_config::ConfigRequest;
use cursor_runner_domain::state::ExecutionState;
use cursor_runner_pool::{Pool, SlotTicket};

pub(crate) type Reply<T> = oneshot::Sender<Result<T, EngineError>>;

pub(crate) enum Command {
    StartTurn {
        prompt: Prompt,
        replace_active: bool,
        /// Completed (and, unless claimed before, claimed) by the commit that starts the turn.
        key: CallKey,
        reply: Reply<TurnRecord>,
    },
    CancelTurn {
        turn_id: String,
        reply: Reply<TurnRecord>,
    },
    Answer {
        tenant_id: String,
        interaction_id: InteractionId,
        etag: String,
        request_id: String,
        answer: InteractionAnswer,
        /// Claimed by the `answered` commit, completed by the `delivered` one.
        key: CallKey,
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
    /// it; once no turn runs, end the execution `lost` / `DRAINING` (recoverable). Replies
    /// when it has ended. A second drain may only bring the deadline forward; a `force`d
    /// one (the service is shutting down) ends it now, a running turn with its agent.
    Drain {
        deadline: Instant,
        force: bool,
        reply: Reply<ExecutionRecord>,
    },
}

impl Command {
    pub(super) fn name(&self) -> &'static str {
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

pub(super) struct ActiveTurn {
    pub(super) record: TurnRecord,
    pub(super) normalizer: TurnNormalizer,
    /// Serving its prompt, or cancelled and waiting to settle (`machine::turn`).
    pub(super) lifecycle: Turn,
    /// The last sign of life on the turn: a message from the agent, or the end of a
    /// wait on a human. The idle watchdog counts from here.
    pub(super) last_activity: Instant,
    /// The turn's span, a child of the `StartTurn` call's (so of the caller's trace);
    /// ends when the turn settles.
    pub(super) span: tracing::Span,
}

/// An interaction the actor holds: its machine, and the agent's request until it is answered.
pub(super) struct LiveInteraction {
    pub(super) interaction: Interaction,
    pub(super) request: Option<AgentRequest>,
    /// The key of the call answering it, told what each of its commits did to the key.
    pub(super) key: Option<CallKey>,
}

pub(super) struct Actor {
    pub(super) store: Arc<dyn Store>,
    pub(super) config: Arc<EngineConfig>,
    pub(super) pool: Pool,
    pub(super) record: ExecutionRecord,
    /// The state `record`'s row is in, as last written: every write compares and sets it.
    pub(super) stored_state: ExecutionState,
    pub(super) events: EventWriter,
    pub(super) process: AgentProcess,
    pub(super) connection: AcpConnection,
    /// The leased slot; `None` once the process went back to the pool.
    pub(super) ticket: Option<SlotTicket>,
    /// What the process's `initialize` answered, and the prompt content it accepts.
    pub(super) initialized: Value,
    pub(super) prompt_capabilities: PromptCapabilities,
    /// Sessions the process served before this one.
    pub(super) sessions_served: u32,
    pub(super) session_id: String,
    /// The agent's latest `configOptions` (empty on builds without them).
    pub(super) config_options: Value,
    /// The flat `models` list of `session/new`, for builds without `configOptions`.
    pub(super) legacy_models: Value,
    /// ACP `modes` of `session/new` (`availableModes`), for agents without `configOptions`.
    pub(super) modes: Value,
    /// The operator's agent profile: its ask modes bound every mode change.
    pub(super) agent_profile: Option<Arc<cursor_runner_pool::agent_profile::AgentProfile>>,
    /// The runner-owned MCP servers (allowlist names) the session was opened with: part
    /// of its recorded identity, kept through every configuration change.
    pub(super) mcp_servers: Vec<String>,
    pub(super) turn: Option<ActiveTurn>,
    pub(super) session_normalizer: TurnNormalizer,
    pub(super) pending: PendingInteractions,
    pub(super) policy: ApprovalPolicy,
    pub(super) wait_limit: Duration,
    /// Keeps the workspace watched while the actor lives.
    pub(super) _workspace_watch: Option<WatchGuard>,
    /// `StartTurn`'s admission, and the `replace_active` start it queued (if any).
    pub(super) admission: Admission,
    /// The reply of the queued `replace_active` start.
    pub(super) queued_reply: Option<(CallKey, Reply<TurnRecord>)>,
    /// Set by a clean close the pool accepts: the process serves another session.
    pub(super) reuse: bool,
    /// The service is draining: refuse new turns, settle the running one by the
    /// deadline (else cancel it), then close.
    pub(super) drain: Drain,
    /// The replies of the drains asked, sent once the execution has ended.
    pub(super) drain_replies: Vec<Reply<ExecutionRecord>>,
    /// The last checkpoint of the session's home being stored (each waits for the one
    /// before it); `true` once stored.
    pub(super) checkpoint_upload: Option<tokio::task::JoinHandle<bool>>,
}

/// How an actor's loop ends.
pub(super) enum Ending {
    Continue,
    Stop,
}

/// A change of the session's configuration.
pub(crate) enum ConfigChange {
    /// Model (+ parameters) and/or mode.
    Request(ConfigRequest),
    /// One option by its id (`SetConfigOption`).
    Option { config_id: String, value: String },
}

pub(crate) fn exited(pid: u32, exit: ExitProof, initiated_by: &str) -> ActivityPayload {
    ActivityPayload::ProcessExited(ProcessExited {
        pid,
        exit_code: exit.exit_code,
        signal: exit.signal,
        initiated_by: initiated_by.into(),
    })
}

/// Answers an agent request; a write failure means the process is gone, which the
/// reader reports separately.
pub(super) async fn respond(request: AgentRequest, result: Result<Value, RpcError>) {
    if let Err(e) = request.respond(result).await {
        tracing::debug!(error = %e, "answering an agent request failed");
    }
}

/// The interactions this actor holds pending, each listed in the replica's [`Answerable`]
/// while it is here.
pub(super) struct PendingInteractions {
    live: HashMap<InteractionId, LiveInteraction>,
    answerable: Answerable,
}

impl PendingInteractions {
    pub(super) fn new(answerable: Answerable) -> Self {
        Self {
            live: HashMap::new(),
            answerable,
        }
    }

    pub(super) fn insert(&mut self, live: LiveInteraction) {
        let record = live.interaction.record();
        self.answerable
            .insert(&record.id, &record.tenant_id, &record.execution_id);
        self.live.insert(record.id.clone(), live);
    }

    pub(super) fn remove(&mut self, id: &str) -> Option<LiveInteraction> {
        self.answerable.remove(id);
        self.live.remove(id)
    }

    pub(super) fn ids(&self) -> Vec<InteractionId> {
        self.live.keys().cloned().collect()
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &LiveInteraction> {
        self.live.values()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Every one of them, leaving none.
    pub(super) fn take_all(&mut self) -> Vec<LiveInteraction> {
        let ids = self.ids();
        ids.iter().filter_map(|id| self.remove(id)).collect()
    }
}

impl Drop for PendingInteractions {
    fn drop(&mut self) {
        for id in self.live.keys() {
            self.answerable.remove(id);
        }
    }
}
