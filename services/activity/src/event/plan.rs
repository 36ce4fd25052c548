//! `plan.updated`: the checklist snapshot.

use serde::{Deserialize, Serialize};

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
