//! Domain errors: a kind (mapped once to a gRPC code at the edge) and a stable reason
//! from one catalog (`docs/errors.md`).

use cursor_runner_activity::Redactor;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Unauthenticated,
    InvalidArgument,
    NotFound,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    ResourceExhausted,
    PermissionDenied,
    Unavailable,
    Internal,
}

impl ErrorKind {
    /// Refusals are decided before anything changes (validation, missing resources,
    /// preconditions, conflicts); the other kinds may follow a side effect.
    pub fn is_refusal(self) -> bool {
        matches!(
            self,
            Self::Unauthenticated
                | Self::InvalidArgument
                | Self::NotFound
                | Self::FailedPrecondition
                | Self::Aborted
                | Self::OutOfRange
                | Self::ResourceExhausted
                | Self::PermissionDenied
        )
    }
}

macro_rules! reasons {
    ($($variant:ident => $text:literal: $doc:literal),+ $(,)?) => {
        /// The catalog of stable error reasons (`google.rpc.ErrorInfo.reason`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Reason { $(#[doc = $doc] $variant),+ }

        impl Reason {
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $text),+ }
            }

            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some(Self::$variant),)+ _ => None }
            }

            pub fn description(self) -> &'static str {
                match self { $(Self::$variant => $doc),+ }
            }
        }
    };
}

reasons! {
        Unauthenticated => "UNAUTHENTICATED": "Token authentication is on and the call carries no valid bearer token.",
    TenantRequired => "TENANT_REQUIRED": "The call carries no tenant (`x-tenant-id` metadata).",
    RequestIdRequired => "REQUEST_ID_REQUIRED": "A mutating call carries no `request_id`.",
    RequestIdReused => "REQUEST_ID_REUSED": "The `request_id` was used before with a different request body.",
    RequestInFlight => "REQUEST_IN_FLIGHT": "A call with this `request_id` is still running in another incarnation of the service.",
    AnotherService => "ANOTHER_SERVICE": "Start-up only: another service process holds the database alone (on SQLite any other one; on PostgreSQL one from before replicas could share a database).",
    ReplicaNameInUse => "REPLICA_NAME_IN_USE": "Start-up only: a live process on the database serves under the same replica name.",
    StateDirInUse => "STATE_DIR_IN_USE": "Start-up only: another live process uses this `--state-dir` (its launch ledger); each replica needs its own, or each would kill the other's agents.",
    MultiReplicaUnsupported => "MULTI_REPLICA_UNSUPPORTED": "Start-up only: the embedded SQLite store serves a single replica; multi-replica mode (`--replica-name`, `--advertise-address`, `--internal-listen`) needs PostgreSQL.",
    RequestInterrupted => "REQUEST_INTERRUPTED": "The service stopped while a call with this `request_id` ran; what it had begun was settled at restart. Final for this `request_id`: send a new one to try again.",
    InvalidArgument => "INVALID_ARGUMENT": "A field is missing or malformed; the message names it.",
    FieldTooLong => "FIELD_TOO_LONG": "A string field (or a list) of the request is over its bound; the metadata names the field and the bound.",
    MessageTooLarge => "MESSAGE_TOO_LARGE": "The encoded request message is over the transport's bound (4 MiB); nothing in it was read. Metadata `max_bytes`.",
    MessageMalformed => "MESSAGE_MALFORMED": "The request message could not be decoded as the method's protobuf type; nothing in it was read.",
        WorkspaceInvalid => "WORKSPACE_INVALID": "The workspace is not an absolute path to an existing directory.",
        CredentialWrongProvider => "CREDENTIAL_WRONG_PROVIDER": "The credential binding names another provider than `cursor`.",
    CredentialWrongSession => "CREDENTIAL_WRONG_SESSION": "The credential is not bound to the execution's `control_session_id`.",
    CredentialUnbound => "CREDENTIAL_UNBOUND": "The binding names a variable an agent may not receive (CURSOR_API_KEY or CURSOR_AUTH_TOKEN, or one of the agent profile's `credential_variables`).",
    CredentialMissing => "CREDENTIAL_MISSING": "The binding names a credential but carries no secret.",
    CredentialMalformed => "CREDENTIAL_MALFORMED": "The binding's secret cannot be handed to an agent and kept out of everything derived from its output: it holds a NUL byte (no environment variable can), or it is shorter than the redactor searches for (8 characters). The message says which, never the secret.",
    CredentialStale => "CREDENTIAL_STALE": "The credential binding has expired.",
    WorkspacePolicy => "WORKSPACE_POLICY": "The workspace (up to its Git root) or the host holds configuration that would load code into the agent (MCP servers, hooks, plugins); the metadata names the path.",
    ExecutionNotFound => "EXECUTION_NOT_FOUND": "No execution with this id exists for the caller's tenant.",
    TurnNotFound => "TURN_NOT_FOUND": "No turn with this id exists for the caller's tenant (for `CancelTurn`: for the named execution).",
    InteractionNotFound => "INTERACTION_NOT_FOUND": "No interaction with this id exists for the caller's tenant.",
    ExecutionNotReady => "EXECUTION_NOT_READY": "The execution is not ready (closed, failed, or lost its agent); the message names its state.",
    TurnActive => "TURN_ACTIVE": "A turn is already running: Cursor has no steering and a second prompt would cancel the first.",
    NoActiveTurn => "NO_ACTIVE_TURN": "The named turn is the execution's, but it has settled.",
    InteractionNotPending => "INTERACTION_NOT_PENDING": "The interaction is no longer pending; the message and metadata name its state.",
    StaleEtag => "STALE_ETAG": "The etag does not match the interaction's current fence (generation, turn).",
    AnswerConflict => "ANSWER_CONFLICT": "The interaction was already answered with this `request_id` and a different answer.",
    AnswerInvalid => "ANSWER_INVALID": "The answer does not fit the persisted request (unknown, forged, duplicate or missing selections).",
    CursorAheadOfHead => "CURSOR_AHEAD_OF_HEAD": "`after_sequence` is beyond the newest event of the execution.",
    AckBeyondHead => "ACK_BEYOND_HEAD": "`through_sequence` is beyond the newest event of the execution.",
    AckRegression => "ACK_REGRESSION": "`through_sequence` is below the sequence already acknowledged.",
        AgentLaunchFailed => "AGENT_LAUNCH_FAILED": "The agent process could not be started.",
    DistributionUnverified => "DISTRIBUTION_UNVERIFIED": "The pinned Cursor distribution no longer matches its manifest; nothing was launched.",
    AgentExited => "AGENT_EXITED": "The agent process exited (during the handshake, or before it answered a call); the message carries its exit status and a bounded stderr tail.",
    AgentUnresponsive => "AGENT_UNRESPONSIVE": "The agent did not answer in time: `initialize` or `session/new` within the handshake timeout, a configuration change or `ListModels` within `AGENT_CALL_LIMIT` (15 s); an execution whose agent read nothing of a write for `AGENT_WRITE_STALL_LIMIT` (10 s) is `lost` with this reason.",
    AuthRequired => "AUTH_REQUIRED": "The agent answered -32000: it is not authenticated (or refused the profile's `authenticate`). Metadata `auth_methods` lists the method ids the agent advertised. Not retried.",
    ProtocolError => "PROTOCOL_ERROR": "The agent answered with a JSON-RPC error or a malformed result.",
    ServiceShuttingDown => "SERVICE_SHUTTING_DOWN": "The service is shutting down; open streams end with this and the sequence to resume after.",
    StoreUnavailable => "STORE_UNAVAILABLE": "The database could not be reached or refused the write.",
    ReplicaFenced => "REPLICA_FENCED": "The replica serving the execution lost its ownership lease (it could not renew it in time): it wrote nothing more, stopped its agents and exits; its restart, or another replica, settles what it owned. Retry after `RetryInfo`.",
    OwnerUnreachable => "OWNER_UNREACHABLE": "The call was for an execution another replica owns, and forwarding it there failed: the owner did not answer (it died, froze, or is unreachable from this replica). Whether it ran is unknown: retry with the same `request_id` after `RetryInfo`; once the owner's lease ends another replica takes the execution over, and the retry gets the outcome its key holds. Metadata `owner_replica`.",
    Draining => "DRAINING": "The service is draining (`Drain` or SIGTERM): it takes no new executions or turns; retry on another replica. An execution the drain ended is `lost` with this failure reason: `RecoverExecution` continues it.",
    EventsPruned => "EVENTS_PRUNED": "`after_sequence` is below the oldest event still kept: the events after it were acknowledged and pruned past the retention period. Metadata `oldest_sequence`; resume from `oldest_sequence - 1`.",
    BudgetExhausted => "BUDGET_EXHAUSTED": "The execution's limits allow no further turn: its `max_turns` are used, or its `max_active_time` is spent (limits come from `CreateExecution`, capped by the tenant's policy). Nothing was sent to the agent.",
    StreamsExhausted => "STREAMS_EXHAUSTED": "The execution has as many open event streams as one execution may have (`MAX_STREAMS_PER_EXECUTION`); close one, or share a stream. Nothing was opened.",
    PoolExhausted => "POOL_EXHAUSTED": "No agent process is available within the pool's limits (per profile, per node); `RetryInfo` says when to retry, or ask for a `lease_wait`.",
    ProfileQuarantined => "PROFILE_QUARANTINED": "The profile's agents failed past the restart intensity; new executions fail fast until the window passes or an operator clears it. Metadata `cause` is the agent's own reason (e.g. `AUTH_REQUIRED`).",
    ProfileNotFound => "PROFILE_NOT_FOUND": "No pool profile has this id.",
    PermissionDenied => "PERMISSION_DENIED": "The caller is authenticated but not an administrator, and the call is an admin call.",
    AgentProfileUnknown => "AGENT_PROFILE_UNKNOWN": "`agent_profile` names no profile in this runner's agent profiles file (`--agent-profiles`), or the runner has none.",
    AgentProfileSecretUnreadable => "AGENT_PROFILE_SECRET_UNREADABLE": "A secret file of the named agent profile is missing, unreadable, empty or over 64 KiB; metadata names the profile and the variable, never the value. Nothing was launched.",
    ApprovalModeUnavailable => "APPROVAL_MODE_UNAVAILABLE": "The execution's approval policy needs the agent to ask before running tools, and its agent profile names no mode that makes it ask (`ask_mode`), or the agent does not advertise that mode, or the requested mode is not one of them. Metadata `available_modes` lists the agent's own modes. Nothing was prompted.",
    McpServerNotAllowed => "MCP_SERVER_NOT_ALLOWED": "A named MCP server is not in this runner's allowlist (`--mcp-servers`); callers can only pick runner-owned servers, never pass commands.",
    McpTransportUnsupported => "MCP_TRANSPORT_UNSUPPORTED": "A named MCP server uses HTTP or SSE and the agent does not advertise that transport in `mcpCapabilities`.",
    PromptInvalid => "PROMPT_INVALID": "A prompt block is malformed or over a bound: too many blocks, too much text, an image too large or not of the type it claims, a resource link without a uri or name.",
    PromptContentUnsupported => "PROMPT_CONTENT_UNSUPPORTED": "The prompt carries content the agent does not advertise (Cursor: no audio, no embedded context); metadata `content` names it.",
    ModelUnavailable => "MODEL_UNAVAILABLE": "The requested model, model parameter or mode is not offered by the agent, or the agent echoed another value than the one requested; nothing was prompted. Metadata names the option, the requested and the echoed value.",
    SessionNotFound => "SESSION_NOT_FOUND": "The recorded session is unknown to this tenant, or the agent has no history for it (`session/load` answered -32602 \"not found\" or -32002).",
    SessionIdentityMismatch => "SESSION_IDENTITY_MISMATCH": "A session load or recovery asked for another workspace, model, parameters, mode or MCP servers than the session was recorded with; metadata names the field.",
    SessionInUse => "SESSION_IN_USE": "The recorded session is still open in a live execution; close it first.",
    ExecutionNotRecoverable => "EXECUTION_NOT_RECOVERABLE": "RecoverExecution needs an execution that lost its agent (`lost`) and had a session; the message names its state.",
    OwnerLost => "OWNER_LOST": "Not a call's error: why an execution is `lost` when the replica that owned it stopped renewing its ownership lease (it died, froze or lost the database) and another replica took it over. Its turn failed `provider_lost`, its pending questions expired `provider_process_lost`; `RecoverExecution` starts it again.",
    ExecutionFenced => "EXECUTION_FENCED": "The execution's generation moved on (its process was replaced): this agent's writes are refused and it was stopped.",
    Internal => "INTERNAL": "An internal invariant failed; the message says which.",
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct EngineError {
    pub kind: ErrorKind,
    pub reason: Reason,
    pub message: String,
    /// Extra `ErrorInfo` metadata (e.g. `state` for a non-pending interaction).
    pub metadata: Vec<(String, String)>,
    /// When a retry may succeed (`google.rpc.RetryInfo`).
    pub retry_after: Option<std::time::Duration>,
}

impl EngineError {
    pub fn new(kind: ErrorKind, reason: Reason, message: impl Into<String>) -> Self {
        Self {
            kind,
            reason,
            message: message.into(),
            metadata: Vec::new(),
            retry_after: None,
        }
    }

    /// The error with every secret `redactor` knows replaced by its marker, in the
    /// message and the metadata: for errors that carry the agent's own words.
    pub fn redacted(mut self, redactor: &Redactor) -> Self {
        if redactor.is_empty() {
            return self;
        }
        self.message = redactor.redact_text(&self.message).0;
        for (_, value) in &mut self.metadata {
            *value = redactor.redact_text(value).0;
        }
        self
    }

    pub fn retry_after(mut self, delay: std::time::Duration) -> Self {
        self.retry_after = Some(delay);
        self
    }

    /// Refused before anything changed: an idempotency key used by it stays free.
    pub fn is_refusal(&self) -> bool {
        self.kind.is_refusal()
            || matches!(
                self.reason,
                Reason::Draining | Reason::ProfileQuarantined | Reason::PoolExhausted | Reason::ReplicaFenced
            )
    }

    /// The store could not be reached, so nothing is known to have happened: the same call
    /// may be sent again (it is not the call's final outcome).
    pub fn is_transient(&self) -> bool {
        self.kind == ErrorKind::Unavailable && self.reason == Reason::StoreUnavailable
    }

    pub fn with(mut self, key: &str, value: impl Into<String>) -> Self {
        self.metadata.push((key.to_owned(), value.into()));
        self
    }

    pub fn invalid(reason: Reason, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, reason, message)
    }

    /// `FIELD_TOO_LONG` for a text `field` of more than `max_chars` characters.
    pub fn too_many_chars(field: &str, max_chars: usize) -> Self {
        Self::invalid(Reason::FieldTooLong, format!("{field} is over {max_chars} characters"))
            .with("field", field)
            .with("max_chars", max_chars.to_string())
    }

    /// `FIELD_TOO_LONG` for a list or map `field` of more than `max_entries` entries.
    pub fn too_many_entries(field: &str, max_entries: usize) -> Self {
        Self::invalid(
            Reason::FieldTooLong,
            format!("{field} has more than {max_entries} entries"),
        )
        .with("field", field)
        .with("max_entries", max_entries.to_string())
    }

    pub fn precondition(reason: Reason, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::FailedPrecondition, reason, message)
    }

    pub fn not_found(reason: Reason, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, reason, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, Reason::Internal, message)
    }

    /// The form kept in an idempotency row, so a retry gets the same error.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "kind": format!("{:?}", self.kind),
                "reason": self.reason.as_str(),
                "message": self.message,
                "metadata": self.metadata,
                "retryAfterMs": self.retry_after.map(|d| d.as_millis() as u64),
            }
        })
    }

    pub fn from_json(value: &serde_json::Value) -> Option<Self> {
        let error = value.get("error")?;
        let kind = match error.get("kind")?.as_str()? {
            "InvalidArgument" => ErrorKind::InvalidArgument,
            "Unauthenticated" => ErrorKind::Unauthenticated,
            "NotFound" => ErrorKind::NotFound,
            "FailedPrecondition" => ErrorKind::FailedPrecondition,
            "Aborted" => ErrorKind::Aborted,
            "OutOfRange" => ErrorKind::OutOfRange,
            "ResourceExhausted" => ErrorKind::ResourceExhausted,
            "PermissionDenied" => ErrorKind::PermissionDenied,
            "Unavailable" => ErrorKind::Unavailable,
            _ => ErrorKind::Internal,
        };
        let reason = Reason::parse(error.get("reason")?.as_str()?).unwrap_or(Reason::Internal);
        let metadata = serde_json::from_value(error.get("metadata").cloned().unwrap_or_default()).unwrap_or_default();
        Some(Self {
            kind,
            reason,
            message: error.get("message")?.as_str()?.to_owned(),
            metadata,
            retry_after: error
                .get("retryAfterMs")
                .and_then(serde_json::Value::as_u64)
                .map(std::time::Duration::from_millis),
        })
    }
}

/// The pause a call refused for a store outage suggests before it is retried (`RetryInfo`).
pub const STORE_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// The pause a call whose owner did not answer suggests (`RetryInfo`): about one lease
/// renewal, after which the owner answers again or its lease is on the way to ending.
pub const OWNER_UNREACHABLE_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// The pause a call refused by a replica that lost its lease suggests (`RetryInfo`): about
/// a container's restart, after which its successor has settled what it owned.
pub const REPLICA_FENCED_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_survive_the_idempotency_row() {
        let e = EngineError::precondition(Reason::InteractionNotPending, "delivered").with("state", "delivered");
        assert_eq!(EngineError::from_json(&e.to_json()), Some(e));
    }

    #[test]
    fn every_reason_is_documented_in_the_catalog() {
        let catalog = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/errors.md"))
            .expect("docs/errors.md exists");
        for reason in Reason::ALL {
            assert!(
                catalog.contains(&format!("`{}`", reason.as_str())),
                "{} missing",
                reason.as_str()
            );
        }
    }
}
