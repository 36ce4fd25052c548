//! Durable interactions: what the agent asked (persisted before it is exposed), the
//! opaque ids the control plane answers with, and the validation of an answer against
//! the persisted request. One module per kind; this one holds what they share.

pub mod permission;
pub mod plan;
pub mod question;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::error::EngineError;
use crate::state::InteractionState;
pub use cursor_runner_activity::InteractionKind;
use cursor_runner_store::{InteractionRecord, Store};
pub use permission::PermissionRequest;
pub use plan::PlanRequest;
pub use question::QuestionRequest;

/// Characters one description (a prompt, label, title, plan text, todo) may have.
pub const MAX_DESCRIPTION_CHARS: usize = 100_000;
/// UTF-8 bytes of a whole persisted request.
pub const MAX_DURABLE_PAYLOAD_BYTES: usize = 196 * 1024;

/// Why a native request was refused. The agent gets a refusal on the wire (never a
/// silent drop) and the control plane a notice.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct RequestRefused(pub String);

/// Who may decide the agent's permission requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApprovalPolicy {
    /// A human decides each request; session-scoped approval is not offered.
    #[default]
    Ask,
    /// A human decides; `allow_always` may be offered.
    AllowSessionScope,
    /// Every permission request is rejected without a human.
    DenyAll,
}

impl ApprovalPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ask => "ask",
            Self::AllowSessionScope => "allow_session_scope",
            Self::DenyAll => "deny_all",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "ask" => Some(Self::Ask),
            "allow_session_scope" => Some(Self::AllowSessionScope),
            "deny_all" => Some(Self::DenyAll),
            _ => None,
        }
    }
}

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
        let text = serde_json::to_string(self).map_err(|e| RequestRefused(e.to_string()))?;
        if text.len() > MAX_DURABLE_PAYLOAD_BYTES {
            return Err(RequestRefused(format!(
                "the request is {} bytes, over the {MAX_DURABLE_PAYLOAD_BYTES}-byte durable bound",
                text.len()
            )));
        }
        Ok(text)
    }
}

/// The result that cancels any interaction on the wire (the same shape for all kinds).
pub fn cancelled_result() -> Value {
    json!({"outcome": {"outcome": "cancelled"}})
}

/// Refuses text over [`MAX_DESCRIPTION_CHARS`]; it is never truncated.
pub(crate) fn check_chars(field: &str, text: &str) -> Result<(), RequestRefused> {
    if text.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(RequestRefused(format!(
            "a {field} over {MAX_DESCRIPTION_CHARS} characters"
        )));
    }
    Ok(())
}

/// An answer from the control plane, in the interaction's opaque ids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InteractionAnswer {
    /// Selections for every question of a `question`.
    Questions(Vec<question::Selection>),
    /// Decline: a question is `skipped`; a permission selects its `reject_once` option.
    Decline {
        reason: Option<String>,
    },
    /// Cancel the request, whatever its kind.
    Cancel,
    AcceptPlan {
        feedback: Option<String>,
    },
    RejectPlan {
        reason: Option<String>,
    },
    /// One offered option of a `permission`.
    SelectOption {
        option_id: String,
    },
}

impl InteractionAnswer {
    /// A digest of the answer, to tell a retry from a different answer.
    pub fn fingerprint(&self) -> String {
        let bytes = serde_json::to_vec(self).unwrap_or_default();
        hex::encode(Sha256::digest(&bytes))
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
