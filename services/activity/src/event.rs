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
    #[serde(rename = "provider.notice.recorded")]
    ProviderNotice(ProviderNotice),
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
    "provider.notice.recorded",
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
            | Self::ProviderNotice(_) => 1,
            _ => 0,
        }
    }

    /// The item id the envelope carries, where the family has one.
    pub fn item_id(&self) -> Option<&str> {
        match self {
            Self::ItemStarted(b) | Self::ItemCompleted(b) => Some(&b.item_id),
            Self::ItemDelta(d) => Some(&d.item_id),
            Self::ToolStarted(t) | Self::ToolProgressed(t) | Self::ToolCompleted(t) => Some(&t.tool_call_id),
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
    pub tool_call_id: String,
    pub transport: String,
    pub operation: ToolOperation,
    pub name: String,
    pub status: ToolStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<Value>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub raw_input_truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Which validated `rawOutput` field made the tool `failed` (Cursor never sends `failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_source: Option<String>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub output: Option<BoundedOutput>,
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
}

impl ProviderNotice {
    pub fn warning(category: impl Into<String>, scope: NoticeScope, summary: impl Into<String>) -> Self {
        Self {
            severity: Severity::Warning,
            category: category.into(),
            scope,
            recoverable: true,
            user_actionable: false,
            summary: crate::bound_text(&summary.into(), NOTICE_SUMMARY_CHARS).text,
        }
    }
}

/// Characters a notice summary may carry (PRP short text).
pub const NOTICE_SUMMARY_CHARS: usize = 4000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_serializes_to_a_listed_event_type() {
        let samples = vec![
            ActivityPayload::TurnStarted(TurnStarted {
                turn_id: "t".into(),
                turn_number: 1,
                prompt_chars: 3,
            }),
            ActivityPayload::ProviderNotice(ProviderNotice::warning("c", NoticeScope::Turn, "s")),
        ];
        for sample in samples {
            let (event_type, _) = sample.into_parts();
            assert!(EVENT_TYPES.contains(&event_type.as_str()), "{event_type}");
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
