//! Durable interactions: what the agent asked (persisted before it is exposed), the
//! opaque ids the control plane answers with, and the validation of an answer against
//! the persisted request. One module per kind; this one holds what they share.

mod answer;
mod bounds;
pub mod permission;
pub mod plan;
pub mod question;
mod reason;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::EngineError;
use crate::state::InteractionState;
pub use answer::{InteractionAnswer, Selection, cancelled_result};
use bounds::durable_json;
pub use bounds::{MAX_DESCRIPTION_CHARS, MAX_DURABLE_PAYLOAD_BYTES, RequestRefused};
pub use cursor_runner_activity::InteractionKind;
pub use permission::{ApprovalPolicy, PermissionRequest};
pub use plan::PlanRequest;
pub use question::QuestionRequest;
pub use reason::InteractionReason;

/// The persisted request of one interaction; `kind` tags the JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PersistedRequest {
    Question(QuestionRequest),
    Plan(PlanRequest),
    Permission(PermissionRequest),
}

impl PersistedRequest {
    pub fn kind(&self) -> InteractionKind {
        match self {
            Self::Question(_) => InteractionKind::Question,
            Self::Plan(_) => InteractionKind::Plan,
            Self::Permission(_) => InteractionKind::Permission,
        }
    }

    pub fn tool_call_id(&self) -> Option<&str> {
        match self {
            Self::Question(q) => q.tool_call_id.as_deref(),
            Self::Plan(p) => p.tool_call_id.as_deref(),
            Self::Permission(p) => Some(&p.tool_call_id),
        }
    }

    /// Validates an answer and returns the JSON-RPC result to send to the agent.
    pub fn outcome_for(&self, answer: &InteractionAnswer) -> Result<Value, EngineError> {
        match self {
            Self::Question(q) => q.outcome_for(answer).map(|o| o.to_result()),
            Self::Plan(p) => p.outcome_for(answer),
            Self::Permission(p) => p.outcome_for(answer),
        }
    }

    /// How an interaction still pending when its turn ends is recorded: a permission
    /// is `cancelled`; a question or plan `expired` (not replayable, full request kept)
    /// so the control plane can ask the human durably — as Paperclip's runner does.
    pub fn state_when_turn_ends(&self) -> InteractionState {
        match self {
            Self::Permission(_) => InteractionState::Cancelled,
            Self::Question(_) | Self::Plan(_) => InteractionState::Expired,
        }
    }

    /// The JSON text to persist, checked against the durable payload bound.
    pub fn to_durable_json(&self) -> Result<String, RequestRefused> {
        match self {
            Self::Question(q) => durable_json(InteractionKind::Question, q),
            Self::Plan(p) => durable_json(InteractionKind::Plan, p),
            Self::Permission(p) => durable_json(InteractionKind::Permission, p),
        }
    }
}
