//! The canonical event families (PRP spellings) and their payloads.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::bounds::BoundedOutput;

/// Version of the payload schemas below; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// The closed set of canonical activity events. The adjacently tagged form
/// (`eventType` + `payload`) is exactly how an event is stored and streamed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "eventType", content = "payload")]
pub enum ActivityPayload {
    #[serde(rename = "turn.started")]
    TurnStarted(TurnStarted),
    #[serde(rename = "turn.completed")]
    TurnCompleted(TurnSettled),
    #[serde(rename = "turn.cancelled")]
    TurnCancelled(TurnSettled),
    #[serde(rename = "turn.interrupted")]
    TurnInterrupted(TurnSettled),
    #[serde(rename = "turn.failed")]
    TurnFailed(TurnSettled),
    #[serde(rename = "item.started")]
    ItemStarted(ItemBoundary),
    #[serde(rename = "item.delta")]
    ItemDelta(ItemDelta),
    #[serde(rename = "item.completed")]
    ItemCompleted(ItemBoundary),
    #[serde(rename = "tool.execution.started")]
    ToolStarted(ToolExecution),
    #[serde(rename = "tool.execution.progressed")]
    ToolProgressed(ToolExecution),
    #[serde(rename = "tool.execution.completed")]
    ToolCompleted(ToolExecution),
    #[serde(rename = "runtime_request.created")]
    RuntimeRequestCreated(RuntimeRequestCreated),
    #[serde(rename = "runtime_request.resolved")]
    RuntimeRequestResolved(RuntimeRequestResolved),
    #[serde(rename = "runtime_request.cancelled")]
    RuntimeRequestCancelled(RuntimeRequestEnded),
    #[serde(rename = "runtime_request.expired")]
    RuntimeRequestExpired(RuntimeRequestEnded),
    #[serde(rename = "process.spawned")]
    ProcessSpawned(ProcessSpawned),
    #[serde(rename = "process.exited")]
    ProcessExited(ProcessExited),
    /// The execution is done with its process, which goes back to the pool to serve
    /// another session of the same profile (instead of `process.exited`).
    #[serde(rename = "process.released")]
    ProcessReleased(ProcessReleased),
    #[serde(rename = "provider.notice.recorded")]
    ProviderNotice(ProviderNotice),
    #[serde(rename = "plan.updated")]
    PlanUpdated(PlanUpdated),
    #[serde(rename = "delegation.started")]
    DelegationStarted(Delegation),
    #[serde(rename = "delegation.updated")]
    DelegationUpdated(Delegation),
    #[serde(rename = "delegation.completed")]
    DelegationCompleted(Delegation),
    #[serde(rename = "review.mode.changed")]
    ReviewModeChanged(ReviewModeChanged),
    /// Extension family (the spec lists no member of PRP's `session.*`).
    #[serde(rename = "session.config.updated")]
    SessionConfigUpdated(SessionConfigUpdated),
    /// Extension family (the spec lists no member of PRP's `session.*`).
    #[serde(rename = "session.info.updated")]
    SessionInfoUpdated(SessionInfoUpdated),
    /// Extension family (the spec lists no member of PRP's `session.*`).
    #[serde(rename = "session.commands.updated")]
    SessionCommandsUpdated(SessionCommandsUpdated),
    /// Extension family: a recorded session was loaded (`session/load`) into this
    /// execution's process — at `CreateExecution`, or by a recovery under a new generation.
    #[serde(rename = "session.loaded")]
    SessionLoaded(SessionLoaded),
    #[serde(rename = "usage.reported")]
    UsageReported(UsageReported),
    #[serde(rename = "artifact.generated")]
    ArtifactGenerated(ArtifactGenerated),
    #[serde(rename = "artifact.viewed")]
    ArtifactViewed(ArtifactViewed),
}

/// Every `eventType` of the closed set, for documentation and mapping checks.
pub const EVENT_TYPES: &[&str] = &[
    "turn.started",
    "turn.completed",
    "turn.cancelled",
    "turn.interrupted",
    "turn.failed",
    "item.started",
    "item.delta",
    "item.completed",
    "tool.execution.started",
    "tool.execution.progressed",
    "tool.execution.completed",
    "runtime_request.created",
    "runtime_request.resolved",
    "runtime_request.cancelled",
    "runtime_request.expired",
    "process.spawned",
    "process.exited",
    "process.released",
    "provider.notice.recorded",
    "plan.updated",
    "delegation.started",
    "delegation.updated",
    "delegation.completed",
    "review.mode.changed",
    "session.config.updated",
    "session.info.updated",
    "session.commands.updated",
    "session.loaded",
    "usage.reported",
    "artifact.generated",
    "artifact.viewed",
];

/// The event types of [`EVENT_TYPES`] that are extensions: families PRP lacks.
pub const EXTENSION_EVENT_TYPES: &[&str] = &[
    "process.spawned",
    "process.exited",
    "process.released",
    "session.config.updated",
    "session.info.updated",
    "session.commands.updated",
    "session.loaded",
];

impl ActivityPayload {
    /// Splits the event into its PRP `eventType` and its JSON payload.
    pub fn into_parts(&self) -> (String, Value) {
        let mut value = serde_json::to_value(self).expect("payloads always serialize");
        let event_type = value["eventType"].as_str().unwrap_or_default().to_owned();
        let payload = value.get_mut("payload").map(Value::take).unwrap_or(Value::Null);
        (event_type, payload)
    }

    /// PRP priority: 0 lifecycle and interactions (never dropped or coalesced),
    /// 1 structure, 2 deltas.
    pub fn priority(&self) -> u8 {
        match self {
            Self::ItemDelta(_) => 2,
            Self::ItemStarted(_)
            | Self::ItemCompleted(_)
            | Self::ToolStarted(_)
            | Self::ToolProgressed(_)
            | Self::ToolCompleted(_)
            | Self::ProviderNotice(_)
            | Self::PlanUpdated(_)
            | Self::DelegationStarted(_)
            | Self::DelegationUpdated(_)
            | Self::DelegationCompleted(_)
            | Self::ReviewModeChanged(_)
            | Self::SessionConfigUpdated(_)
            | Self::SessionInfoUpdated(_)
            | Self::SessionCommandsUpdated(_)
            | Self::SessionLoaded(_)
            | Self::ArtifactGenerated(_)
            | Self::ArtifactViewed(_) => 1,
            _ => 0,
        }
    }

    /// The item id the envelope carries, where the family has one.
    pub fn item_id(&self) -> Option<&str> {
        match self {
            Self::ItemStarted(b) | Self::ItemCompleted(b) => Some(&b.item_id),
            Self::ItemDelta(d) => Some(&d.item_id),
            Self::ToolStarted(t) | Self::ToolProgressed(t) | Self::ToolCompleted(t) => {
                Some(t.item_id.as_deref().unwrap_or(&t.tool_call_id))
            }
            _ => None,
        }
    }

    /// The child agent this event belongs to; `None` for the root session's events
    /// and for families that carry no attribution.
    pub fn child_id(&self) -> Option<&str> {
        match self {
            Self::ItemStarted(b) | Self::ItemCompleted(b) => b.child_id.as_deref(),
            Self::ItemDelta(d) => d.child_id.as_deref(),
            Self::ToolStarted(t) | Self::ToolProgressed(t) | Self::ToolCompleted(t) => t.child_id.as_deref(),
            Self::PlanUpdated(p) => p.child_id.as_deref(),
            Self::ProviderNotice(n) => n.child_id.as_deref(),
            Self::DelegationStarted(d) | Self::DelegationUpdated(d) | Self::DelegationCompleted(d) => Some(&d.child_id),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnStarted {
    pub turn_id: String,
    pub turn_number: i64,
    pub prompt_chars: u64,
}

/// Why a turn ended other than normally. Spelled as in the service contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnFailureReason {
    AuthRequired,
    AgentExited,
    AgentUnresponsive,
    ProviderLost,
    ProtocolError,
    CancelTimeout,
    /// `StartTurn` with `replace_active` cancelled this turn to start another.
    ReplacedByNewTurn,
    /// The service drained (rolling upgrade) and cancelled the turn at the drain deadline.
    ServiceDraining,
    /// The turn ran past its wall-clock deadline and was cancelled.
    DeadlineExceeded,
    /// The execution's active-time budget ran out during the turn, which was cancelled.
    BudgetExhausted,
    /// The agent sent nothing for the idle timeout while no human was being asked
    /// anything, and the turn was cancelled.
    AgentIdle,
    /// The store stayed unreachable past the outage limit: the agent was stopped, and the
    /// turn was settled once the store was back.
    StoreUnavailable,
}

impl TurnFailureReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AuthRequired => "auth_required",
            Self::AgentExited => "agent_exited",
            Self::AgentUnresponsive => "agent_unresponsive",
            Self::ProviderLost => "provider_lost",
            Self::ProtocolError => "protocol_error",
            Self::CancelTimeout => "cancel_timeout",
            Self::ReplacedByNewTurn => "replaced_by_new_turn",
            Self::ServiceDraining => "service_draining",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::BudgetExhausted => "budget_exhausted",
            Self::AgentIdle => "agent_idle",
            Self::StoreUnavailable => "store_unavailable",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnSettled {
    pub turn_id: String,
    /// The agent's stop reason, verbatim, when the prompt returned one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<TurnFailureReason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ItemKind {
    AgentMessage,
    Reasoning,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    Progress,
    Summary,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemBoundary {
    pub item_id: String,
    pub kind: ItemKind,
    pub channel: Channel,
    /// The child agent (its session id) whose transcript this item is; absent for the
    /// root session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemDelta {
    pub item_id: String,
    pub kind: ItemKind,
    pub channel: Channel,
    pub text: String,
    /// Set when the text was cut to [`crate::MAX_ITEM_TEXT_CHARS`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Set when terminal control sequences were neutralized (see [`crate::sanitize_display`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
    /// The child agent whose transcript this text is; absent for the root session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolOperation {
    Read,
    Search,
    List,
    Execute,
    Edit,
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    Running,
    Completed,
    Failed,
    Cancelled,
    Interrupted,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolExecution {
    /// The native id, local to its session: the same id in two sessions is two tools.
    pub tool_call_id: String,
    /// The child agent whose tool this is; absent for the root session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_id: Option<String>,
    /// The envelope's item id when it is not `toolCallId`: a child's tool call is
    /// scoped by its child (`<turn>:child-<n>:<toolCallId>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_id: Option<String>,
    pub transport: String,
    pub operation: ToolOperation,
    /// The tool's title, sanitized for display and bounded to [`crate::MAX_NAME_CHARS`].
    pub name: String,
    pub status: ToolStatus,
    /// The first workspace-relative location (PRP `target`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Every location inside the workspace, workspace-relative.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locations: Vec<ToolLocation>,
    /// Locations omitted because they are not provably inside the workspace (a warning
    /// notice says so once per tool call); the paths themselves are never emitted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub locations_omitted: u32,
    /// More than [`crate::MAX_TOOL_LOCATIONS`] locations were inside the workspace.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub locations_truncated: bool,
    /// The raw input changed after the tool was first reported.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub input_updated: bool,
    /// ACP `rawInput` as sent, but for its path-only strings (see `raw_paths_rewritten`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<Value>,
    /// The raw input was dropped: over [`crate::MAX_RAW_INPUT_BYTES`] once its paths were
    /// rewritten, or past the path walk's bounds ([`crate::MAX_RAW_VALUE_DEPTH`],
    /// [`crate::MAX_RAW_VALUE_NODES`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub raw_input_truncated: bool,
    /// Strings of `raw_input`, and of the `rawOutput` text kept as `output`, that were
    /// wholly a path inside the workspace and are now workspace-relative.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub raw_paths_rewritten: u32,
    /// … that were wholly a path not provably inside the workspace and are now
    /// [`crate::OUTSIDE_WORKSPACE_MARKER`] (counted in the outside-workspace notice too).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub raw_paths_omitted: u32,
    /// Only from a validated integer `rawOutput.exitCode`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Which validated `rawOutput` field made the tool `failed` (Cursor never sends `failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_source: Option<String>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub output: Option<BoundedOutput>,
    /// Where `output` came from: `raw_output` text wins over `content` text blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_source: Option<OutputSource>,
    /// Provider-reported diff blocks for paths inside the workspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diffs: Vec<ProviderDiff>,
    /// Diff blocks omitted: outside the workspace, or beyond [`crate::MAX_TOOL_DIFFS`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub diffs_omitted: u32,
    /// Image/audio/resource content blocks as references; their bytes are never ingested.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<ToolArtifactRef>,
    /// Content-block references omitted: outside the workspace, an unsupported URI
    /// scheme, or beyond [`crate::MAX_TOOL_ARTIFACTS`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub artifacts_omitted: u32,
    /// Set when display text (the title, a path) had control sequences neutralized.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
}

impl ToolExecution {
    /// A tool call known only by its id.
    pub fn new(tool_call_id: impl Into<String>) -> Self {
        Self {
            tool_call_id: tool_call_id.into(),
            child_id: None,
            item_id: None,
            transport: "builtin".into(),
            operation: ToolOperation::Unknown,
            name: String::new(),
            status: ToolStatus::Running,
            target: None,
            locations: Vec::new(),
            locations_omitted: 0,
            locations_truncated: false,
            input_updated: false,
            raw_input: None,
            raw_input_truncated: false,
            raw_paths_rewritten: 0,
            raw_paths_omitted: 0,
            exit_code: None,
            failure_source: None,
            output: None,
            output_source: None,
            diffs: Vec::new(),
            diffs_omitted: 0,
            artifacts: Vec::new(),
            artifacts_omitted: 0,
            sanitized: false,
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolLocation {
    /// Workspace-relative, `/`-separated; `.` is the workspace itself.
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputSource {
    RawOutput,
    Content,
}

/// What a provider diff block does to its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffChange {
    /// `oldText` null or absent: a new file.
    Create,
    Modify,
    /// `newText` empty: the file is deleted.
    Delete,
}

/// One provider-reported `{type:"diff", path, oldText?, newText}` block. Texts are data
/// (kept byte-exact, not sanitized), each cut to its head within the tool's
/// [`crate::MAX_DIFF_TEXT_BYTES`] budget, with its full byte count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderDiff {
    pub path: String,
    pub change: DiffChange,
    /// Absent for `create`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_text_bytes: Option<u64>,
    /// Absent for `delete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_text_bytes: Option<u64>,
    /// One of the texts was cut to fit the budget.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactRefKind {
    Image,
    Audio,
    ResourceLink,
    Resource,
}

/// A media or resource content block of a tool call, as a reference only. `reference`
/// is workspace-relative and lexically checked (no filesystem access here): it must be
/// revalidated (realpath containment, regular file, no symlink) before anything reads
/// it. Inline bytes (`data`, `blob`, embedded text) are never carried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolArtifactRef {
    pub kind: ArtifactRefKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// An `http(s)` URI, bounded to [`crate::MAX_URI_CHARS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Always `false`: a reference is not a registered artifact.
    pub registered: bool,
    /// The block carried inline bytes, which were dropped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inline_data_omitted: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InteractionKind {
    Question,
    Plan,
    Permission,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRequestCreated {
    pub interaction_id: String,
    pub kind: InteractionKind,
    pub etag: String,
    pub turn_id: String,
    /// The full persisted request, as `GetInteraction` returns it.
    pub request: Value,
    /// Whether the request's `toolCallId` names a tool call seen in this turn. Cursor's
    /// questions and plans carry no session id, so an unknown one is still accepted and
    /// attributed to the running turn, never guessed elsewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_known: Option<bool>,
    /// The child agent the request came from, when it is a child's (its session id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRequestResolved {
    pub interaction_id: String,
    pub kind: InteractionKind,
    pub turn_id: String,
    pub outcome: Value,
    /// `pipe_written`: the response was written and flushed to the agent's stdin. This
    /// proves transport hand-off, not that the agent acted on it.
    pub delivery: String,
    /// `human` (through `AnswerInteraction`) or `policy` (the approval policy decided).
    pub answered_by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRequestEnded {
    pub interaction_id: String,
    pub kind: InteractionKind,
    pub turn_id: String,
    pub reason: String,
    pub replay_allowed: bool,
    /// What happened on the wire: `pipe_written` (the agent got `cancelled`),
    /// `not_sent` (the process was gone), or `unknown`.
    pub delivery: String,
    /// The full request, so the control plane can ask the human durably.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessSpawned {
    pub pid: u32,
    /// `unpinned` for a development command; a pinned distribution's digest otherwise.
    pub distribution: String,
    pub program: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessExited {
    pub pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Who ended it: `agent` (it exited by itself) or `runner` (the stop ladder).
    pub initiated_by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessReleased {
    pub pid: u32,
    /// Sessions the process has served, this one included.
    pub sessions_served: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeScope {
    Turn,
    Session,
    Environment,
    Account,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderNotice {
    pub severity: Severity,
    pub category: String,
    pub scope: NoticeScope,
    pub recoverable: bool,
    pub user_actionable: bool,
    pub summary: String,
    /// Set when the summary had terminal control sequences neutralized.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
    /// The child agent the notice is about, when it came from a child's transcript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_id: Option<String>,
}

impl ProviderNotice {
    /// A recoverable, non-actionable notice; the summary is sanitized and bounded.
    pub fn new(
        severity: Severity,
        category: impl Into<String>,
        scope: NoticeScope,
        summary: impl Into<String>,
    ) -> Self {
        let clean = crate::sanitize_display(&summary.into());
        Self {
            severity,
            category: category.into(),
            scope,
            recoverable: true,
            user_actionable: false,
            summary: crate::bound_text(&clean.text, NOTICE_SUMMARY_CHARS).text,
            sanitized: clean.sanitized,
            child_id: None,
        }
    }

    pub fn warning(category: impl Into<String>, scope: NoticeScope, summary: impl Into<String>) -> Self {
        Self::new(Severity::Warning, category, scope, summary)
    }

    pub fn info(category: impl Into<String>, scope: NoticeScope, summary: impl Into<String>) -> Self {
        Self::new(Severity::Info, category, scope, summary)
    }
}

/// Characters a notice summary may carry (PRP short text).
pub const NOTICE_SUMMARY_CHARS: usize = 4000;

/// Canonical checklist step status (PRP). Cursor's `cancelled` has no counterpart: it
/// becomes `blocked` with the label `Cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Pending,
    InProgress,
    Completed,
    Blocked,
}

/// ACP plan entry priority, kept as sent (extension field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepPriority {
    High,
    Medium,
    Low,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanStep {
    pub step_id: String,
    /// Sanitized, bounded to [`crate::MAX_STEP_BODY_CHARS`].
    pub body: String,
    pub status: StepStatus,
    /// Extension: why a step is `blocked` (`Cancelled`, or the unknown native status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Extension: the ACP entry priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<StepPriority>,
}

/// Where a checklist snapshot came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanSource {
    /// ACP `plan` update: the whole list, replaced.
    AcpPlan,
    /// `cursor/update_todos`, merged (`merge:true`) or replaced.
    CursorTodos,
}

/// `plan.updated`: a full snapshot of the turn's checklist; it replaces the previous
/// snapshot of the same `planId`. `revision` strictly increases.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanUpdated {
    pub plan_id: String,
    pub revision: u64,
    pub steps: Vec<PlanStep>,
    /// Extension: which native update produced this snapshot.
    pub source: PlanSource,
    /// Extension: the checklist lost detail (steps beyond [`crate::MAX_PLAN_STEPS`] or
    /// malformed entries); a `*_detail_partial` notice said so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
    /// The child agent whose checklist this is; absent for the root session's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DelegationStatus {
    Running,
    Waiting,
    Completed,
    Failed,
    Interrupted,
    Closed,
}

impl DelegationStatus {
    /// `running` and `waiting` children may still act; the others have ended.
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Running | Self::Waiting)
    }
}

/// PRP `action`: what the parent did to the child in this event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DelegationAction {
    /// A new child (`delegation.started`).
    Spawn,
    /// A child resumed under a new id `<agentId>.<n>` (`delegation.started`).
    Resume,
    /// The child went idle or needs action (ACP `subagent_update`).
    Wait,
    /// The child ended (`delegation.completed`).
    Close,
}

/// A bounded summary of one child's activity for compact displays — not its
/// transcript (that is the child's attributed `item.*`, `tool.*` and `plan.*` events).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivitySummary {
    /// The tail of the child's text, reasoning, tool and plan lines, at most
    /// [`crate::MAX_ACTIVITY_SUMMARY_CHARS`]; a dropped head is marked by a leading `…`.
    pub text: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    pub tool_calls: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tools_failed: u32,
}

/// `delegation.*`: a child agent's record, a full snapshot in every event.
///
/// - From Cursor's `subagent_spawned` / `subagent_state_update` (or ACP's
///   `subagent_update`), `childId` is the child's session id, `parentId` the session
///   that spawned it (the root or another child) and `parentToolCallId` the parent's
///   `Task` tool call: the typed edge. The child's own events carry the same `childId`.
/// - From `cursor/task` alone (no lifecycle seen), it is metadata sent when the `Task`
///   tool call ends — also for a failed task — so `evidence` says
///   `cursor_task_metadata`: `completed` means "reported finished", not "succeeded".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delegation {
    /// The child's session id; from `cursor/task` alone, `agentId` when sent, else the
    /// `Task` tool call id.
    pub child_id: String,
    /// The immediate parent's session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// The parent's `Task` tool call (the typed edge from parent to child).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_tool_call_id: Option<String>,
    /// Cursor's `_meta.cursor.agentId`, fixed at the spawn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<DelegationAction>,
    /// From `subagentType`: its string, `custom` for `{"custom": name}`, else `unknown`
    /// (also until a `cursor/task` names the type of a spawned child).
    pub role: String,
    /// The custom subagent's name, or the spawn's display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `subagentType` as compact JSON when it had an unrecognized shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_type_raw: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The task description, bounded to [`crate::MAX_DELEGATION_TASK_CHARS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub task_truncated: bool,
    /// Characters of the child's prompt (the prompt itself is not carried).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_chars: Option<u64>,
    pub status: DelegationStatus,
    /// The native state behind `status`, as sent (`completed`, `cancelled`,
    /// `disconnected`, `idle`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_state: Option<String>,
    /// Why the status is not simply the native state's: `disconnected` is a failure,
    /// `cancelled` an interruption, a child still open when the turn settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The first incarnation (its `childId`) of a resumed child, when seen in this turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<String>,
    /// `n` of a resumed child's id `<agentId>.<n>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity_summary: Option<ActivitySummary>,
    /// What the record rests on: `cursor_subagent_lifecycle`, `acp_subagent_update`,
    /// `cursor_task_metadata` (not proof of success) or `turn_settled`.
    pub evidence: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
}

impl Delegation {
    /// A record known only by its child id, role, status and evidence.
    pub fn new(
        child_id: impl Into<String>,
        role: impl Into<String>,
        status: DelegationStatus,
        evidence: impl Into<String>,
    ) -> Self {
        Self {
            child_id: child_id.into(),
            parent_id: None,
            parent_tool_call_id: None,
            agent_id: None,
            action: None,
            role: role.into(),
            name: None,
            subagent_type_raw: None,
            model: None,
            task: None,
            task_truncated: false,
            prompt_chars: None,
            status,
            native_state: None,
            explanation: None,
            duration_ms: None,
            resumed_from: None,
            incarnation: None,
            activity_summary: None,
            evidence: evidence.into(),
            sanitized: false,
        }
    }
}

/// `review.mode.changed` (PRP family) from ACP `current_mode_update`; the fields are
/// extensions (PRP's payload describes Codex review mode).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewModeChanged {
    pub mode_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_mode_id: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
}

/// One selectable value of a config option.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigValue {
    pub value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// One ACP `SessionConfigOption`, bounded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigOptionSummary {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// `select`, `boolean`, or the type as sent.
    #[serde(rename = "type")]
    pub option_type: String,
    /// A string (select) or a boolean, as sent; absent when it was neither.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_value: Option<Value>,
    /// The selectable values, groups flattened, up to [`crate::MAX_CONFIG_OPTION_VALUES`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<ConfigValue>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub values_omitted: u32,
}

/// Extension family `session.config.updated` from ACP `config_option_update`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionConfigUpdated {
    pub config_options: Vec<ConfigOptionSummary>,
    /// Options beyond [`crate::MAX_CONFIG_OPTIONS`] or without an id.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub options_omitted: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
}

/// Extension family `session.info.updated` from ACP `session_info_update`. It may
/// arrive after the prompt result (Cursor names sessions asynchronously). A field sent
/// as `null` clears it (`*Cleared`); an absent field is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfoUpdated {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub title_cleared: bool,
    /// As sent (not parsed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub updated_at_cleared: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCommand {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_hint: Option<String>,
}

/// Extension family `session.loaded`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionLoaded {
    pub session_id: String,
    /// A recovery after the previous process died (else a load asked by `CreateExecution`).
    pub recovery: bool,
    /// The execution's generation the session now runs under.
    pub generation: i64,
    /// `session/load` replays the session's history as updates before it answers; they
    /// were shown when they happened and are not emitted again.
    pub replayed_updates_suppressed: u64,
}

/// Extension family `session.commands.updated` from ACP `available_commands_update`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCommandsUpdated {
    pub commands: Vec<SessionCommand>,
    /// Commands beyond [`crate::MAX_SESSION_COMMANDS`] or without a name.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub commands_omitted: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
}

/// A provider-reported cost, as sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportedCost {
    pub amount: f64,
    pub currency: String,
}

/// `usage.reported`, once per turn. Unknown stays unknown: token and cost fields are
/// absent — never zero — unless the agent reported them (ACP `usage_update`: `used`
/// and `size` are the context window's used and total tokens, as sent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageReported {
    pub turn_id: String,
    /// PRP `requestCountSource`: `unavailable` (ACP never reports request counts).
    pub request_count_source: String,
    /// PRP `providerCostStatus`: `reported` or `unpriced`.
    pub provider_cost_status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_cost_unavailable_reason: Option<String>,
    /// Extension: what the numbers rest on, `acp_usage_update`, or absent when nothing
    /// was reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<ReportedCost>,
}

/// An image the agent generated (`cursor/generate_image`). Cursor's reference is a
/// workspace file the runner verified (inside the workspace by real path, a regular
/// file, not a symlink); it is never ingested, and nothing registers it as an artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactGenerated {
    pub artifact_id: String,
    pub tool_call_id: String,
    /// Workspace-relative path; absent when the agent named none or it was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    pub description: String,
    /// `completed`: Cursor reports a generation once it is done.
    pub status: String,
    pub registered: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sanitized: bool,
}

/// A workspace file the agent looked at as a reference image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactViewed {
    pub artifact_id: String,
    pub tool_call_id: String,
    /// Workspace-relative path.
    pub reference: String,
}

/// The events for one `cursor/generate_image`: `artifact.generated`, one
/// `artifact.viewed` per verified reference, and a warning notice when paths were
/// refused (never naming them: they may be private).
pub fn generated_image(
    tool_call_id: &str,
    description: &str,
    reference: Option<String>,
    viewed: Vec<String>,
    refused_paths: usize,
) -> Vec<ActivityPayload> {
    let clean = crate::sanitize_display(&crate::bound_text(description, crate::MAX_METADATA_TEXT_CHARS).text);
    let mut events = vec![ActivityPayload::ArtifactGenerated(ArtifactGenerated {
        artifact_id: tool_call_id.to_owned(),
        tool_call_id: tool_call_id.to_owned(),
        reference,
        description: clean.text,
        status: "completed".into(),
        registered: false,
        sanitized: clean.sanitized,
    })];
    events.extend(viewed.into_iter().enumerate().map(|(n, reference)| {
        ActivityPayload::ArtifactViewed(ArtifactViewed {
            artifact_id: format!("{tool_call_id}:ref-{}", n + 1),
            tool_call_id: tool_call_id.to_owned(),
            reference,
        })
    }));
    if refused_paths > 0 {
        events.push(ActivityPayload::ProviderNotice(ProviderNotice::warning(
            "artifact_path_refused",
            NoticeScope::Turn,
            format!(
                "{refused_paths} image path(s) of `{tool_call_id}` were omitted: outside the workspace, not a regular file, or a symlink"
            ),
        )));
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One sample per variant. The exhaustive match makes a new variant a compile error
    /// here until it gets a sample (and so a check against [`EVENT_TYPES`]).
    fn samples() -> Vec<ActivityPayload> {
        let settled = TurnSettled {
            turn_id: "t".into(),
            stop_reason: None,
            failure_reason: None,
            message: None,
        };
        let boundary = ItemBoundary {
            item_id: "i".into(),
            kind: ItemKind::AgentMessage,
            channel: Channel::Progress,
            child_id: Some("c".into()),
        };
        let ended = RuntimeRequestEnded {
            interaction_id: "i".into(),
            kind: InteractionKind::Question,
            turn_id: "t".into(),
            reason: "turn_settled".into(),
            replay_allowed: false,
            delivery: "pipe_written".into(),
            request: None,
        };
        let mut delegation = Delegation::new("c", "explore", DelegationStatus::Completed, "cursor_subagent_lifecycle");
        delegation.parent_id = Some("p".into());
        delegation.action = Some(DelegationAction::Close);
        delegation.activity_summary = Some(ActivitySummary {
            text: "…done".into(),
            truncated: true,
            tool_calls: 2,
            tools_failed: 1,
        });
        let all = vec![
            ActivityPayload::TurnStarted(TurnStarted {
                turn_id: "t".into(),
                turn_number: 1,
                prompt_chars: 3,
            }),
            ActivityPayload::TurnCompleted(settled.clone()),
            ActivityPayload::TurnCancelled(settled.clone()),
            ActivityPayload::TurnInterrupted(settled.clone()),
            ActivityPayload::TurnFailed(settled),
            ActivityPayload::ItemStarted(boundary.clone()),
            ActivityPayload::ItemDelta(ItemDelta {
                item_id: "i".into(),
                kind: ItemKind::Reasoning,
                channel: Channel::Summary,
                text: "x".into(),
                truncated: false,
                sanitized: true,
                child_id: None,
            }),
            ActivityPayload::ItemCompleted(boundary),
            ActivityPayload::ToolStarted(ToolExecution::new("a")),
            ActivityPayload::ToolProgressed(ToolExecution::new("a")),
            ActivityPayload::ToolCompleted(ToolExecution::new("a")),
            ActivityPayload::RuntimeRequestCreated(RuntimeRequestCreated {
                interaction_id: "i".into(),
                kind: InteractionKind::Plan,
                etag: "e".into(),
                turn_id: "t".into(),
                request: Value::Null,
                tool_call_known: None,
                child_id: None,
            }),
            ActivityPayload::RuntimeRequestResolved(RuntimeRequestResolved {
                interaction_id: "i".into(),
                kind: InteractionKind::Permission,
                turn_id: "t".into(),
                outcome: Value::Null,
                delivery: "pipe_written".into(),
                answered_by: "human".into(),
            }),
            ActivityPayload::RuntimeRequestCancelled(ended.clone()),
            ActivityPayload::RuntimeRequestExpired(ended),
            ActivityPayload::ProcessSpawned(ProcessSpawned {
                pid: 1,
                distribution: "unpinned".into(),
                program: "agent".into(),
            }),
            ActivityPayload::ProcessExited(ProcessExited {
                pid: 1,
                exit_code: Some(0),
                signal: None,
                initiated_by: "agent".into(),
            }),
            ActivityPayload::ProcessReleased(ProcessReleased {
                pid: 1,
                sessions_served: 1,
            }),
            ActivityPayload::ProviderNotice(ProviderNotice::warning("c", NoticeScope::Turn, "s")),
            ActivityPayload::PlanUpdated(PlanUpdated {
                plan_id: "p".into(),
                revision: 1,
                steps: vec![PlanStep {
                    step_id: "s".into(),
                    body: "b".into(),
                    status: StepStatus::Blocked,
                    label: Some("Cancelled".into()),
                    priority: Some(StepPriority::Low),
                }],
                source: PlanSource::CursorTodos,
                partial: false,
                sanitized: false,
                child_id: Some("c".into()),
            }),
            ActivityPayload::DelegationStarted(delegation.clone()),
            ActivityPayload::DelegationUpdated(delegation.clone()),
            ActivityPayload::DelegationCompleted(delegation),
            ActivityPayload::ReviewModeChanged(ReviewModeChanged {
                mode_id: "plan".into(),
                previous_mode_id: None,
                sanitized: false,
            }),
            ActivityPayload::SessionConfigUpdated(SessionConfigUpdated {
                config_options: Vec::new(),
                options_omitted: 0,
                sanitized: false,
            }),
            ActivityPayload::SessionInfoUpdated(SessionInfoUpdated {
                title: Some("x".into()),
                title_cleared: false,
                updated_at: None,
                updated_at_cleared: false,
                sanitized: false,
            }),
            ActivityPayload::SessionCommandsUpdated(SessionCommandsUpdated {
                commands: Vec::new(),
                commands_omitted: 0,
                sanitized: false,
            }),
            ActivityPayload::SessionLoaded(SessionLoaded {
                session_id: "s".into(),
                recovery: true,
                generation: 2,
                replayed_updates_suppressed: 3,
            }),
            ActivityPayload::UsageReported(UsageReported {
                turn_id: "t".into(),
                request_count_source: "unavailable".into(),
                provider_cost_status: "unpriced".into(),
                provider_cost_unavailable_reason: Some("cursor_reports_no_usage".into()),
                usage_source: None,
                used: None,
                size: None,
                cost: None,
            }),
            ActivityPayload::ArtifactGenerated(ArtifactGenerated {
                artifact_id: "tc".into(),
                tool_call_id: "tc".into(),
                reference: Some("out/cat.png".into()),
                description: "a cat".into(),
                status: "completed".into(),
                registered: false,
                sanitized: false,
            }),
            ActivityPayload::ArtifactViewed(ArtifactViewed {
                artifact_id: "tc:ref-1".into(),
                tool_call_id: "tc".into(),
                reference: "in/dog.png".into(),
            }),
        ];
        for sample in &all {
            match sample {
                ActivityPayload::TurnStarted(_)
                | ActivityPayload::TurnCompleted(_)
                | ActivityPayload::TurnCancelled(_)
                | ActivityPayload::TurnInterrupted(_)
                | ActivityPayload::TurnFailed(_)
                | ActivityPayload::ItemStarted(_)
                | ActivityPayload::ItemDelta(_)
                | ActivityPayload::ItemCompleted(_)
                | ActivityPayload::ToolStarted(_)
                | ActivityPayload::ToolProgressed(_)
                | ActivityPayload::ToolCompleted(_)
                | ActivityPayload::RuntimeRequestCreated(_)
                | ActivityPayload::RuntimeRequestResolved(_)
                | ActivityPayload::RuntimeRequestCancelled(_)
                | ActivityPayload::RuntimeRequestExpired(_)
                | ActivityPayload::ProcessSpawned(_)
                | ActivityPayload::ProcessExited(_)
                | ActivityPayload::ProcessReleased(_)
                | ActivityPayload::ProviderNotice(_)
                | ActivityPayload::PlanUpdated(_)
                | ActivityPayload::DelegationStarted(_)
                | ActivityPayload::DelegationUpdated(_)
                | ActivityPayload::DelegationCompleted(_)
                | ActivityPayload::ReviewModeChanged(_)
                | ActivityPayload::SessionConfigUpdated(_)
                | ActivityPayload::SessionInfoUpdated(_)
                | ActivityPayload::SessionCommandsUpdated(_)
                | ActivityPayload::SessionLoaded(_)
                | ActivityPayload::UsageReported(_)
                | ActivityPayload::ArtifactGenerated(_)
                | ActivityPayload::ArtifactViewed(_) => {}
            }
        }
        all
    }

    #[test]
    fn every_variant_serializes_to_a_listed_event_type() {
        let mut seen = std::collections::BTreeSet::new();
        for sample in samples() {
            let (event_type, _) = sample.into_parts();
            assert!(EVENT_TYPES.contains(&event_type.as_str()), "{event_type}");
            seen.insert(event_type);
        }
        assert_eq!(seen.len(), EVENT_TYPES.len(), "every listed event type has a variant");
        for extension in EXTENSION_EVENT_TYPES {
            assert!(EVENT_TYPES.contains(extension), "{extension}");
        }
    }

    #[test]
    fn every_variant_round_trips_through_its_parts() {
        for event in samples() {
            let (event_type, payload) = event.into_parts();
            let back: ActivityPayload =
                serde_json::from_value(serde_json::json!({"eventType": event_type, "payload": payload})).unwrap();
            assert_eq!(back, event);
        }
    }

    #[test]
    fn new_families_have_their_priorities() {
        for event in samples() {
            let (event_type, _) = event.into_parts();
            let expected = match event_type.as_str() {
                "item.delta" => 2,
                "usage.reported" => 0,
                t if t.starts_with("turn.") || t.starts_with("runtime_request.") || t.starts_with("process.") => 0,
                _ => 1,
            };
            assert_eq!(event.priority(), expected, "{event_type}");
        }
    }

    #[test]
    fn payload_round_trips_through_its_parts() {
        let event = ActivityPayload::TurnCompleted(TurnSettled {
            turn_id: "t1".into(),
            stop_reason: Some("end_turn".into()),
            failure_reason: None,
            message: None,
        });
        let (event_type, payload) = event.into_parts();
        assert_eq!(event_type, "turn.completed");
        let back: ActivityPayload =
            serde_json::from_value(serde_json::json!({"eventType": event_type, "payload": payload})).unwrap();
        assert_eq!(back, event);
    }
}
