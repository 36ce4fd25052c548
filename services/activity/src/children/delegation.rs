//! Building `delegation.*` records: their evidence, display text, ACP `subagent_update`
//! patches and `cursor/task` metadata.

use agent_client_protocol_schema::MaybeUndefined;
use agent_client_protocol_schema::v1 as acp;
use cursor_runner_acp::cursor::{SubagentType, TaskParams};

use crate::bounds::*;
use crate::event::*;
use crate::sanitize::{display_text, sanitize_display};

/// `evidence` of records from Cursor's `subagent_spawned` / `subagent_state_update`.
pub(super) const EVIDENCE_LIFECYCLE: &str = "cursor_subagent_lifecycle";
/// `evidence` of records from ACP 1.20's `subagent_update`.
pub(super) const EVIDENCE_ACP: &str = "acp_subagent_update";
/// `evidence` of records from `cursor/task`: metadata, not proof of success.
pub(super) const EVIDENCE_TASK: &str = "cursor_task_metadata";
/// `evidence` of the terminal record `finish()` writes for a child still open.
pub(super) const EVIDENCE_SETTLED: &str = "turn_settled";
/// An id for a notice summary (ids in notices come from the agent).
pub(super) fn shown(id: &str) -> String {
    display_text(id, MAX_NAME_CHARS).0
}

pub(super) fn display(text: Option<&str>, max_chars: usize, sanitized: &mut bool) -> Option<String> {
    let (text, clean) = display_text(text.filter(|s| !s.is_empty())?, max_chars);
    *sanitized |= clean;
    Some(text)
}

/// Sets the record's task, sanitized and bounded; returns whether it was cut.
pub(super) fn set_task(record: &mut Delegation, task: Option<&str>) -> bool {
    let Some(task) = task.filter(|t| !t.is_empty()) else {
        record.task = None;
        record.task_truncated = false;
        return false;
    };
    let clean = sanitize_display(task);
    let bounded = bound_text(&clean.text, MAX_DELEGATION_TASK_CHARS);
    record.sanitized |= clean.sanitized;
    record.task = Some(bounded.text);
    record.task_truncated = bounded.truncated;
    bounded.truncated
}

/// Applies an ACP `subagent_update` patch: `title` is the name, `description` the task,
/// `state` the status (`running`; `idle` and `requires_action` wait; `unknown` and
/// custom states keep the status and record the native state).
pub(super) fn apply_acp_patch(record: &mut Delegation, update: &acp::SubagentUpdate) {
    match &update.title {
        MaybeUndefined::Value(title) => {
            record.name = display(Some(title), MAX_NAME_CHARS, &mut record.sanitized);
        }
        MaybeUndefined::Null => record.name = None,
        MaybeUndefined::Undefined => {}
    }
    match &update.description {
        MaybeUndefined::Value(description) => {
            set_task(record, Some(description));
        }
        MaybeUndefined::Null => {
            set_task(record, None);
        }
        MaybeUndefined::Undefined => {}
    }
    match &update.state {
        MaybeUndefined::Value(state) => {
            let (status, native) = match state {
                acp::StateUpdate::Running(_) => (Some(DelegationStatus::Running), "running".to_owned()),
                acp::StateUpdate::Idle(_) => (Some(DelegationStatus::Waiting), "idle".to_owned()),
                acp::StateUpdate::RequiresAction(_) => (Some(DelegationStatus::Waiting), "requires_action".to_owned()),
                acp::StateUpdate::Other(other) => (None, display_text(&other.state, MAX_NAME_CHARS).0),
                _ => (None, "unknown".to_owned()),
            };
            if let Some(status) = status {
                record.status = status;
            }
            record.native_state = Some(native);
        }
        MaybeUndefined::Null => record.native_state = None,
        MaybeUndefined::Undefined => {}
    }
}

/// `cursor/task` params, validated: sent when the `Task` tool call ends, also for a
/// failed task, so it is metadata, not proof of success.
pub(super) struct CursorTask {
    /// As sent, to match the spawn's tool call id.
    pub(super) tool_call_id: Option<String>,
    pub(super) agent_id: Option<String>,
    /// `agentId`, else the tool call id, for display.
    pub(super) child_id: String,
    pub(super) parent_tool_call_id: Option<String>,
    pub(super) role: String,
    pub(super) name: Option<String>,
    pub(super) subagent_type_raw: Option<String>,
    pub(super) model: Option<String>,
    pub(super) task: Option<String>,
    pub(super) task_truncated: bool,
    pub(super) prompt_chars: Option<u64>,
    pub(super) duration_ms: Option<u64>,
    pub(super) sanitized: bool,
}

impl CursorTask {
    /// `None` without an `agentId` or a `toolCallId`.
    pub(super) fn parse(params: &TaskParams) -> Option<Self> {
        fn text(field: &Option<String>) -> Option<&str> {
            field.as_deref().filter(|s| !s.is_empty())
        }
        let tool_call_id = text(&params.tool_call_id);
        let agent_id = text(&params.agent_id);
        let child = agent_id.or(tool_call_id)?;
        let mut sanitized = false;
        let mut clean = |raw: &str, max: usize| {
            let (text, s) = display_text(raw, max);
            sanitized |= s;
            text
        };
        let child_id = clean(child, MAX_NAME_CHARS);
        let parent_tool_call_id = tool_call_id.map(|id| clean(id, MAX_NAME_CHARS));
        let (role, name, subagent_type_raw) = match &params.subagent_type {
            None => ("unspecified".to_owned(), None, None),
            Some(SubagentType::Named(kind)) => (clean(kind, MAX_NAME_CHARS), None, None),
            Some(SubagentType::Custom(custom)) => ("custom".to_owned(), Some(clean(custom, MAX_NAME_CHARS)), None),
            Some(SubagentType::Other(other)) => (
                "unknown".to_owned(),
                None,
                Some(clean(&other.to_string(), MAX_NAME_CHARS)),
            ),
        };
        let model = text(&params.model).map(|m| clean(m, MAX_NAME_CHARS));
        let (task, task_truncated) = match text(&params.description) {
            Some(description) => {
                let sane = sanitize_display(description);
                sanitized |= sane.sanitized;
                let bounded = bound_text(&sane.text, MAX_DELEGATION_TASK_CHARS);
                (Some(bounded.text), bounded.truncated)
            }
            None => (None, false),
        };
        let prompt_chars = params.prompt.as_deref().map(|p| p.chars().count() as u64);
        let duration_ms = params.duration_ms.as_ref().and_then(|d| {
            d.as_u64().or_else(|| {
                d.as_f64()
                    .filter(|f| f.is_finite() && *f >= 0.0 && *f < u64::MAX as f64)
                    .map(|f| f.round() as u64)
            })
        });
        Some(Self {
            tool_call_id: tool_call_id.map(str::to_owned),
            agent_id: agent_id.map(str::to_owned),
            child_id,
            parent_tool_call_id,
            role,
            name,
            subagent_type_raw,
            model,
            task,
            task_truncated,
            prompt_chars,
            duration_ms,
            sanitized,
        })
    }

    /// The record of a task whose child was never seen (the client did not opt in, or
    /// the child belongs to another turn).
    pub(super) fn into_delegation(self) -> Delegation {
        let mut record = Delegation::new(self.child_id, self.role, DelegationStatus::Completed, EVIDENCE_TASK);
        record.parent_tool_call_id = self.parent_tool_call_id;
        record.name = self.name;
        record.subagent_type_raw = self.subagent_type_raw;
        record.model = self.model;
        record.task = self.task;
        record.task_truncated = self.task_truncated;
        record.prompt_chars = self.prompt_chars;
        record.duration_ms = self.duration_ms;
        record.sanitized = self.sanitized;
        record
    }
}
