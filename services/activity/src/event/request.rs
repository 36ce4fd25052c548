//! `runtime_request.*`: interactions the agent asked a human for.

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
