//! Records as the store reads and writes them, with the domain's types where the domain has
//! one (states, interaction kinds, the lease and the session configuration): a row whose
//! state no machine here knows fails to read rather than travelling on as a string. The
//! domain crate owns what the states mean and which transitions are legal. The SQL rows
//! behind executions, turns and interactions (JSON columns as text) are private to
//! `sql::rows`.

use cursor_runner_activity::{InteractionKind, UsageReported};
pub use cursor_runner_domain::ids::{ExecutionId, Generation, InteractionId, TurnId};
use cursor_runner_domain::interaction::ApprovalPolicy;
pub use cursor_runner_domain::interaction::InteractionReason;
use cursor_runner_domain::lease::LeaseInfo;
pub use cursor_runner_domain::limits::ExecutionLimits;
use cursor_runner_domain::session_config::SessionConfig;
use cursor_runner_domain::state::{Delivery, ExecutionState, InteractionState, TurnState};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    pub tenant_id: String,
    pub operation: String,
    pub request_id: String,
}

/// One call's hold on an idempotency key, stored with its claim: a release names it, so a
/// call lets go of its own claim only, never of one another call has since taken on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimToken(String);

impl ClaimToken {
    /// A token no other claim has.
    pub fn new() -> Self {
        Self(uuid::Uuid::new_v4().simple().to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for ClaimToken {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExecutionRecord {
    pub id: ExecutionId,
    pub tenant_id: String,
    pub state: ExecutionState,
    pub generation: Generation,
    pub workspace: String,
    pub session_id: Option<String>,
    pub active_turn_id: Option<TurnId>,
    pub turn_count: i64,
    pub pid: Option<i64>,
    pub exit_code: Option<i64>,
    pub exit_signal: Option<i64>,
    pub failure_reason: Option<String>,
    pub failure_message: Option<String>,
    pub acked_sequence: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// `ask`, `allow_session_scope` or `deny_all`.
    pub approval_policy: ApprovalPolicy,
    pub interaction_wait_limit_ms: i64,
    /// How the agent process was leased.
    pub lease: Option<LeaseInfo>,
    /// Mode, model and parameters in effect.
    pub session_config: Option<SessionConfig>,
    /// The bound credential's name (`CURSOR_API_KEY`, `CURSOR_AUTH_TOKEN`); never its value.
    pub credential_name: Option<String>,
    /// Bounds before spend.
    pub limits: ExecutionLimits,
    /// Wall-clock time its settled turns ran, summed.
    pub active_ms: i64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnRecord {
    pub id: TurnId,
    pub execution_id: ExecutionId,
    pub tenant_id: String,
    pub generation: Generation,
    pub turn_number: i64,
    pub state: TurnState,
    pub stop_reason: Option<String>,
    pub failure_reason: Option<String>,
    pub failure_message: Option<String>,
    pub started_at_ms: i64,
    pub ended_at_ms: Option<i64>,
    /// The attempt's attribution: the credential's name, the configuration in effect
    /// and the usage the agent reported (`None`: none, unknown).
    pub credential_name: Option<String>,
    pub session_config: Option<SessionConfig>,
    pub usage: Option<UsageReported>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct InteractionRecord {
    pub id: InteractionId,
    pub execution_id: ExecutionId,
    pub tenant_id: String,
    pub generation: Generation,
    pub turn_id: TurnId,
    /// The agent's JSON-RPC id, JSON-encoded (`0`, `"abc"`).
    pub native_request_id: String,
    pub kind: InteractionKind,
    pub state: InteractionState,
    pub etag: String,
    /// The request as persisted: the agent's words, redacted.
    pub request: serde_json::Value,
    /// The outcome sent (or to be sent) to the agent.
    pub outcome: Option<serde_json::Value>,
    pub answer_request_id: Option<String>,
    pub answer_fingerprint: Option<String>,
    /// Why it ended without a human's answer, or the policy that answered it.
    pub reason: Option<InteractionReason>,
    /// How far the answer got; set when the interaction ends.
    pub delivery: Option<Delivery>,
    pub replay_allowed: bool,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventRecord {
    pub execution_id: ExecutionId,
    pub sequence: i64,
    pub event_id: String,
    pub generation: Generation,
    pub turn_id: Option<TurnId>,
    pub item_id: Option<String>,
    pub event_type: String,
    pub priority: i64,
    pub schema_version: i64,
    pub emitted_at_ms: i64,
    /// JSON of the payload.
    pub payload: String,
}

/// A session's agent-side state, packed (`docs/scale-out.md` §6): written by the
/// execution that ran the session, read by whichever replica loads or recovers it.
#[derive(Clone, Default, PartialEq, sqlx::FromRow)]
pub struct SessionCheckpoint {
    pub tenant_id: String,
    pub session_id: String,
    /// The execution (and its generation, and its turns settled) the state is of.
    #[sqlx(try_from = "String")]
    pub execution_id: ExecutionId,
    #[sqlx(try_from = "i64")]
    pub generation: Generation,
    pub turn_count: i64,
    /// How `body` is packed (`tar+gzip/1`).
    pub format: String,
    pub raw_bytes: i64,
    pub stored_bytes: i64,
    /// Hex sha256 of `body`.
    pub sha256: String,
    pub body: Vec<u8>,
    pub taken_at_ms: i64,
}

impl std::fmt::Debug for SessionCheckpoint {
    /// The body is bytes nobody reads in a log: its size and digest say what it is.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCheckpoint")
            .field("tenant_id", &self.tenant_id)
            .field("session_id", &self.session_id)
            .field("execution_id", &self.execution_id)
            .field("generation", &self.generation)
            .field("turn_count", &self.turn_count)
            .field("format", &self.format)
            .field("raw_bytes", &self.raw_bytes)
            .field("stored_bytes", &self.stored_bytes)
            .field("sha256", &self.sha256)
            .field("taken_at_ms", &self.taken_at_ms)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Default)]
pub struct InteractionQuery {
    pub tenant_id: String,
    pub execution_id: Option<ExecutionId>,
    pub state: Option<InteractionState>,
    pub after_id: Option<InteractionId>,
    pub limit: i64,
}

/// Milliseconds since the Unix epoch, the store's time unit.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
