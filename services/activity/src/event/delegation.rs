//! `delegation.*`: child agents' records.

use serde::{Deserialize, Serialize};

use super::skip::is_zero;

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
