//! What every part of the engine shares: the engine itself, the commands it takes and
//! the items it streams.

use parking_lot::Mutex;

use crate::answerable::Answerable;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cursor_runner_store::{
    EventRecord, ExecutionId, ExecutionRecord, IdempotencyKey, InteractionId, InteractionRecord, Store,
};

use crate::credential::CredentialBinding;
use cursor_runner_activity::Redactor;
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use crate::actor::Command;
use crate::config::EngineConfig;
use crate::heads::{Head, HeadBus};
use crate::limits::ExecutionLimits;
use crate::metrics::Metrics;
use cursor_runner_domain::error::EngineError;
use cursor_runner_domain::interaction::{ApprovalPolicy, InteractionAnswer};
use cursor_runner_domain::session_config::ConfigRequest;
use cursor_runner_pool::Pool;

pub type ExecutionView = ExecutionRecord;

/// Identity of a mutating call.
#[derive(Debug, Clone)]
pub struct RequestMeta {
    pub tenant_id: String,
    pub request_id: String,
    /// Digest of the request body without its `request_id`; for a call on one subject,
    /// `subject/body` ([`RequestMeta::answer`]).
    pub request_digest: String,
}

impl RequestMeta {
    /// The identity of an answer: the interaction is its subject and the answer given its
    /// body. The etag it echoes is not part of what was answered: a retry under a stale one
    /// is the same answer, as it is once the answer is recorded.
    pub fn answer(tenant_id: String, request_id: String, interaction_id: &str, answer: &InteractionAnswer) -> Self {
        let subject = hex::encode(Sha256::digest(interaction_id.as_bytes()));
        Self {
            tenant_id,
            request_id,
            request_digest: format!("{subject}/{}", answer.fingerprint()),
        }
    }
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

/// How long a question or plan waits for a human unless the execution says otherwise.
pub const DEFAULT_INTERACTION_WAIT_LIMIT: Duration = Duration::from_secs(30 * 60);

/// The longest wait limit an execution may ask for.
pub const MAX_INTERACTION_WAIT_LIMIT: Duration = Duration::from_secs(7 * 24 * 60 * 60);

#[derive(Debug, Clone)]
pub struct AnswerCommand {
    pub interaction_id: InteractionId,
    pub etag: String,
    pub answer: InteractionAnswer,
}

/// The interaction an answer is for, as the caller found it.
pub enum AnswerTarget {
    /// Read for the caller's tenant ([`Engine::get_interaction`]), which also tells where
    /// to [`Engine::route`] the call.
    Read(Box<InteractionRecord>),
    /// Held pending by an actor here ([`Engine::pending_here`]): no row was read.
    PendingHere { execution_id: ExecutionId },
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

pub(super) struct ExecutionHandle {
    /// Whose it is: a call of another tenant never reaches it.
    pub(super) tenant_id: String,
    pub(super) commands: mpsc::Sender<(Command, tracing::Span)>,
    pub(super) head: watch::Receiver<Head>,
    /// The secrets kept out of what the actor's errors say.
    pub(super) redactor: Redactor,
}

pub(super) type InFlight = watch::Receiver<Option<Result<Value, EngineError>>>;

/// The open event streams of each execution on this replica.
pub(super) type OpenStreams = Arc<Mutex<HashMap<String, usize>>>;

/// The sessions being opened in this process, by tenant.
pub(super) type OpeningSessions = Arc<Mutex<std::collections::HashSet<(String, String)>>>;

pub struct Engine {
    pub(super) store: Arc<dyn Store>,
    /// This process's incarnation as a replica: the owner of what it runs.
    pub(super) incarnation: String,
    /// Every execution's head that a stream here watches or a writer here moves.
    pub(super) heads: Arc<HeadBus>,
    /// Open event streams per execution (`streams::MAX_STREAMS_PER_EXECUTION`).
    pub(super) open_streams: OpenStreams,
    /// The interactions this replica's actors hold pending (an answer to one reads no row).
    pub(super) answerable: Answerable,
    /// Sessions a load or recovery is opening now (`sessions::SessionClaim`).
    pub(super) opening_sessions: OpeningSessions,
    pub(super) config: Arc<EngineConfig>,
    pub(super) executions: Arc<Mutex<HashMap<ExecutionId, ExecutionHandle>>>,
    pub(super) in_flight: Mutex<HashMap<IdempotencyKey, (String, InFlight)>>,
    /// Flips to true when the service starts shutting down: open streams end.
    pub(super) closing_streams: watch::Sender<bool>,
    /// Flips to true when a drain begins: health says NOT_SERVING, no new work.
    pub(super) draining: watch::Sender<bool>,
    /// Flips to true when the drain has closed every execution.
    pub(super) drained: watch::Sender<bool>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) pool: Pool,
    /// Background tasks (retention sweep, lag sampler, takeover scan), stopped first at
    /// shutdown.
    pub(super) background: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The lease's heartbeat, stopped last at shutdown: closing the executions writes, and
    /// only a live lease lets it.
    pub(super) heartbeat: Mutex<Option<tokio::task::JoinHandle<()>>>,
}
