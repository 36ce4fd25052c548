//! Durable interactions: what the agent asked (persisted before it is exposed), the
//! opaque ids the control plane answers with, and the validation of an answer against
//! the persisted request. One module per kind; this one holds what they share.

mod answer;
mod bounds;
pub mod permission;
pub mod plan;
pub mod question;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{EngineError, Reason};
use crate::state::InteractionState;
pub use answer::{InteractionAnswer, Selection, cancelled_result};
use bounds::durable_json;
pub use bounds::{MAX_DESCRIPTION_CHARS, MAX_DURABLE_PAYLOAD_BYTES, RequestRefused};
pub use cursor_runner_activity::InteractionKind;
use cursor_runner_store::{InteractionRecord, Store};
pub use permission::{ApprovalPolicy, PermissionRequest};
pub use plan::PlanRequest;
pub use question::QuestionRequest;

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

/// Checks that `from → record.state` is a documented interaction transition. Every
/// durable write of an interaction's state goes through [`transition`], so the state
/// machine of `state.rs` is the one that runs, not only the one that is tested.
pub fn check_transition(from: InteractionState, record: &InteractionRecord) -> Result<InteractionState, EngineError> {
    let to = InteractionState::parse(&record.state)
        .ok_or_else(|| EngineError::internal(format!("unknown interaction state `{}`", record.state)))?;
    if from.can_become(to) {
        Ok(to)
    } else {
        Err(EngineError::internal(format!(
            "interaction `{}`: {from} → {to} is not a transition of the interaction state machine",
            record.id
        )))
    }
}

/// Compare-and-sets an interaction from `from` to `record.state` (same generation),
/// after [`check_transition`]. `Ok(false)`: the row was no longer in `from`.
pub async fn transition(
    store: &dyn Store,
    from: InteractionState,
    record: &InteractionRecord,
) -> Result<bool, EngineError> {
    check_transition(from, record)?;
    Ok(store.transition_interaction(from.as_str(), record).await?)
}

/// The kind a stored interaction row names.
pub(crate) fn kind_of(kind: &str) -> InteractionKind {
    match kind {
        "plan" => InteractionKind::Plan,
        "permission" => InteractionKind::Permission,
        _ => InteractionKind::Question,
    }
}

/// The refusal of an answer to an interaction that is no longer pending.
pub(crate) fn not_pending(record: &InteractionRecord) -> EngineError {
    EngineError::precondition(
        Reason::InteractionNotPending,
        format!("interaction `{}` is {}", record.id, record.state),
    )
    .with("state", record.state.clone())
}

#[cfg(test)]
mod transition_tests {
    use super::*;

    fn record(state: InteractionState) -> InteractionRecord {
        InteractionRecord {
            id: "i-1".into(),
            execution_id: "e-1".into(),
            tenant_id: "t".into(),
            generation: 1,
            turn_id: "turn-1".into(),
            native_request_id: "0".into(),
            kind: "question".into(),
            state: state.as_str().into(),
            etag: "etag".into(),
            request: "{}".into(),
            outcome: None,
            answer_request_id: None,
            answer_fingerprint: None,
            reason: None,
            delivery: None,
            replay_allowed: false,
            created_at_ms: 0,
            updated_at_ms: 0,
        }
    }

    #[test]
    fn only_documented_transitions_pass_the_check_every_other_pair_is_refused() {
        for &from in InteractionState::ALL {
            for &to in InteractionState::ALL {
                let checked = check_transition(from, &record(to));
                assert_eq!(checked.is_ok(), from.can_become(to), "{from} → {to}");
            }
        }
        let mut unknown = record(InteractionState::Answered);
        unknown.state = "resolved".into();
        assert!(check_transition(InteractionState::Pending, &unknown).is_err());
    }
}
