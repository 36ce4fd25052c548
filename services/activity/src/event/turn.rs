//! `turn.*`: a turn's start and settlement.

use serde::{Deserialize, Serialize};

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
    /// `CloseExecution` ended the execution while the turn ran.
    ExecutionClosed,
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
            Self::ExecutionClosed => "execution_closed",
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
