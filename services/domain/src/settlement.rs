//! How turns end and how everything live on an execution settles when its agent is gone:
//! the one home of each rule. [`prompt_end`] reads the agent's answer to `session/prompt`;
//! [`Loss`] is applied by the actor when its agent exits or it must stop the agent (a store
//! outage, a protocol error, a cancel that timed out) and by start-up recovery to what a
//! previous incarnation left live. Both commit the whole settlement as one batch.

use cursor_runner_activity::{Redactor, TurnFailureReason};

use crate::error::Reason;
use crate::interaction::InteractionReason;
use crate::state::{Delivery, ExecutionState, InteractionState, TurnState};

/// Why the agent is gone.
#[derive(Debug, Clone, PartialEq)]
pub enum Loss {
    /// This service's actor saw its agent exit, or had to stop it.
    AgentGone {
        /// The execution's failure reason (`agent_exited`, `store_unavailable`, …).
        reason: Reason,
        turn_failure: TurnFailureReason,
        message: String,
    },
    /// A cancelled turn did not settle within the grace, and the service stopped the agent.
    CancelTimedOut {
        /// Why the service had cancelled the turn, when it did (a deadline, a drain, …).
        cause: Option<TurnFailureReason>,
        message: String,
    },
    /// The service restarted: the agents of its previous incarnation died with it.
    ServiceRestarted,
    /// The replica that owned the execution stopped renewing its ownership lease (it died,
    /// froze or lost the database), and another replica took the execution over: its agent
    /// is gone or about to be (its `agent-init` kills it at the lease's end).
    OwnerLost,
}

/// How a live interaction ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InteractionEnd {
    pub state: InteractionState,
    pub reason: InteractionReason,
    pub delivery: Delivery,
}

/// How a turn ends, as its row and its terminal event record it.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnEnd {
    pub state: TurnState,
    /// The agent's `stopReason`, verbatim, when it gave one.
    pub stop_reason: Option<String>,
    pub failure: Option<TurnFailureReason>,
    pub message: Option<String>,
}

impl TurnEnd {
    /// The end as a row or an event may carry it: the agent's words in it (its stop
    /// reason, a message quoting its error or its stderr) with every bound secret redacted.
    pub fn redacted(self, redactor: &Redactor) -> Self {
        let redact = |text: String| redactor.redact_text(&text).0;
        Self {
            stop_reason: self.stop_reason.map(redact),
            message: self.message.map(redact),
            ..self
        }
    }
}

/// What the agent answered to a turn's `session/prompt`.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptOutcome<'a> {
    /// A result, with its `stopReason` if it had one.
    Stopped(Option<&'a str>),
    /// An error response; `auth_required` when its code is ACP's "authentication required".
    Refused { auth_required: bool, message: String },
}

/// How a turn ends when its prompt returns. `interrupted_by`: the service's reason, when
/// the service (not the caller) cancelled the turn.
pub fn prompt_end(outcome: PromptOutcome<'_>, interrupted_by: Option<TurnFailureReason>) -> TurnEnd {
    let end = |state, stop_reason: Option<&str>, failure, message: Option<String>| TurnEnd {
        state,
        stop_reason: stop_reason.map(str::to_owned),
        failure,
        message,
    };
    match outcome {
        PromptOutcome::Stopped(Some("cancelled")) => match interrupted_by {
            Some(reason) => end(
                TurnState::Interrupted,
                Some("cancelled"),
                Some(reason),
                Some(interruption_message(reason).to_owned()),
            ),
            None => end(TurnState::Cancelled, Some("cancelled"), None, None),
        },
        PromptOutcome::Stopped(Some(reason)) => end(TurnState::Completed, Some(reason), None, None),
        PromptOutcome::Stopped(None) => end(
            TurnState::Failed,
            None,
            Some(TurnFailureReason::ProtocolError),
            Some("the prompt result has no stopReason".to_owned()),
        ),
        PromptOutcome::Refused { auth_required, message } => {
            let failure = if auth_required {
                TurnFailureReason::AuthRequired
            } else {
                TurnFailureReason::ProtocolError
            };
            end(TurnState::Failed, None, Some(failure), Some(message))
        }
    }
}

/// Why the service cancelled a turn, in words.
pub fn interruption_message(reason: TurnFailureReason) -> &'static str {
    match reason {
        TurnFailureReason::ServiceDraining => "cancelled at the service's drain deadline",
        TurnFailureReason::DeadlineExceeded => "cancelled at the turn's deadline",
        TurnFailureReason::BudgetExhausted => "cancelled: the execution's active time is spent",
        TurnFailureReason::AgentIdle => "cancelled: the agent sent nothing for the idle timeout",
        _ => "replaced by a new turn (replace_active)",
    }
}

/// How the execution ends.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionEnd {
    pub state: ExecutionState,
    pub reason: String,
    pub message: Option<String>,
}

const SERVICE_RESTARTED: &str = "service_restarted";
const RESTARTED_MESSAGE: &str = "the service restarted; the agent process is gone";
const OWNER_LOST_MESSAGE: &str = "the replica that ran this execution stopped renewing its ownership lease; another replica took it over and its agent process is gone";

impl Loss {
    /// How an interaction in `state` ends; `None` when it has ended already. Never replayed:
    /// a new process must not get a request its predecessor made, nor an answer meant for it.
    pub fn interaction_end(&self, state: InteractionState) -> Option<InteractionEnd> {
        let delivery = match state {
            InteractionState::Pending => Delivery::NotSent,
            // Recorded, and perhaps written to the pipe: nobody can tell, so nobody claims.
            InteractionState::Answered => Delivery::Unknown,
            _ => return None,
        };
        let reason = match self {
            Self::AgentGone { .. } | Self::CancelTimedOut { .. } | Self::OwnerLost => {
                InteractionReason::ProviderProcessLost
            }
            Self::ServiceRestarted => InteractionReason::ServiceRestarted,
        };
        Some(InteractionEnd {
            state: InteractionState::Expired,
            reason,
            delivery,
        })
    }

    /// How the running turn ends.
    pub fn turn_end(&self) -> TurnEnd {
        let (state, failure, message) = match self {
            Self::AgentGone {
                turn_failure, message, ..
            } => (TurnState::Failed, *turn_failure, message.clone()),
            // The turn reports why it was cancelled when the service did it; the stop
            // ladder is how it ended.
            Self::CancelTimedOut { cause, message } => (
                TurnState::Interrupted,
                cause.unwrap_or(TurnFailureReason::CancelTimeout),
                message.clone(),
            ),
            Self::ServiceRestarted => (
                TurnState::Failed,
                TurnFailureReason::ProviderLost,
                RESTARTED_MESSAGE.to_owned(),
            ),
            Self::OwnerLost => (
                TurnState::Failed,
                TurnFailureReason::ProviderLost,
                OWNER_LOST_MESSAGE.to_owned(),
            ),
        };
        TurnEnd {
            state,
            stop_reason: None,
            failure: Some(failure),
            message: Some(message),
        }
    }

    /// Whether the running turn's time counts against the execution's active-time budget:
    /// not when its agent died with the service (or with its replica), since nobody saw how
    /// long it really ran.
    pub fn charges_turn_time(&self) -> bool {
        !matches!(self, Self::ServiceRestarted | Self::OwnerLost)
    }

    /// How the execution ends: `lost` (a recovery may start it again).
    pub fn execution_end(&self) -> ExecutionEnd {
        let (reason, message) = match self {
            Self::AgentGone { reason, message, .. } => (reason.as_str().to_owned(), Some(message.clone())),
            Self::CancelTimedOut { .. } => ("cancel_timeout".to_owned(), None),
            Self::ServiceRestarted => (SERVICE_RESTARTED.to_owned(), None),
            Self::OwnerLost => (
                Reason::OwnerLost.as_str().to_owned(),
                Some(OWNER_LOST_MESSAGE.to_owned()),
            ),
        };
        ExecutionEnd {
            state: ExecutionState::Lost,
            reason,
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent_exited() -> Loss {
        Loss::AgentGone {
            reason: Reason::AgentExited,
            turn_failure: TurnFailureReason::AgentExited,
            message: "fatal: boom".into(),
        }
    }

    fn cancel_timed_out(cause: Option<TurnFailureReason>) -> Loss {
        Loss::CancelTimedOut {
            cause,
            message: "stopped".into(),
        }
    }

    #[test]
    fn every_interaction_state_ends_by_the_table() {
        use InteractionState::*;
        let expired = |reason, delivery| {
            Some(InteractionEnd {
                state: Expired,
                reason,
                delivery,
            })
        };
        let table = [
            (
                Pending,
                expired(InteractionReason::ProviderProcessLost, Delivery::NotSent),
                expired(InteractionReason::ServiceRestarted, Delivery::NotSent),
            ),
            (
                Answered,
                expired(InteractionReason::ProviderProcessLost, Delivery::Unknown),
                expired(InteractionReason::ServiceRestarted, Delivery::Unknown),
            ),
            (Delivered, None, None),
            (Cancelled, None, None),
            (Expired, None, None),
        ];
        assert_eq!(table.len(), InteractionState::ALL.len(), "every state is in the table");
        for (state, when_agent_gone, when_restarted) in table {
            assert_eq!(agent_exited().interaction_end(state), when_agent_gone, "{state}");
            assert_eq!(
                cancel_timed_out(None).interaction_end(state),
                when_agent_gone,
                "{state}"
            );
            assert_eq!(Loss::ServiceRestarted.interaction_end(state), when_restarted, "{state}");
            assert_eq!(Loss::OwnerLost.interaction_end(state), when_agent_gone, "{state}");
        }
    }

    #[test]
    fn every_ending_is_a_transition_of_its_state_machine() {
        for loss in [
            agent_exited(),
            cancel_timed_out(None),
            Loss::ServiceRestarted,
            Loss::OwnerLost,
        ] {
            for &state in InteractionState::ALL {
                if let Some(ending) = loss.interaction_end(state) {
                    assert!(state.can_become(ending.state), "{state} → {}", ending.state);
                }
            }
            assert!(TurnState::Running.can_become(loss.turn_end().state));
            let execution = loss.execution_end().state;
            for live in [ExecutionState::Starting, ExecutionState::Ready, ExecutionState::Closing] {
                assert!(live.can_become(execution), "{live} → {execution}");
            }
        }
    }

    #[test]
    fn an_agent_gone_fails_the_turn_and_the_execution_with_its_own_reason() {
        assert_eq!(
            agent_exited().turn_end(),
            TurnEnd {
                state: TurnState::Failed,
                stop_reason: None,
                failure: Some(TurnFailureReason::AgentExited),
                message: Some("fatal: boom".into()),
            }
        );
        assert_eq!(
            agent_exited().execution_end(),
            ExecutionEnd {
                state: ExecutionState::Lost,
                reason: "AGENT_EXITED".into(),
                message: Some("fatal: boom".into()),
            }
        );
    }

    #[test]
    fn a_restart_fails_the_turn_as_provider_lost_and_says_why() {
        let turn = Loss::ServiceRestarted.turn_end();
        assert_eq!(turn.failure, Some(TurnFailureReason::ProviderLost));
        assert!(turn.message.unwrap().contains("restarted"));
        assert!(
            !Loss::ServiceRestarted.charges_turn_time(),
            "nobody saw how long it ran"
        );
        assert!(agent_exited().charges_turn_time());
        let execution = Loss::ServiceRestarted.execution_end();
        assert_eq!(
            (execution.state, execution.reason.as_str()),
            (ExecutionState::Lost, "service_restarted")
        );
    }

    #[test]
    fn a_takeover_fails_the_turn_as_provider_lost_and_ends_the_execution_owner_lost() {
        let turn = Loss::OwnerLost.turn_end();
        assert_eq!(
            (turn.state, turn.failure),
            (TurnState::Failed, Some(TurnFailureReason::ProviderLost))
        );
        assert!(turn.message.unwrap().contains("ownership lease"));
        assert!(!Loss::OwnerLost.charges_turn_time(), "nobody saw how long it ran");
        let execution = Loss::OwnerLost.execution_end();
        assert_eq!(
            (execution.state, execution.reason.as_str()),
            (ExecutionState::Lost, "OWNER_LOST")
        );
        assert!(execution.message.unwrap().contains("took it over"));
    }

    #[test]
    fn a_cancel_that_timed_out_interrupts_the_turn_with_the_services_cause() {
        let drained = cancel_timed_out(Some(TurnFailureReason::ServiceDraining)).turn_end();
        assert_eq!(
            (drained.state, drained.failure),
            (TurnState::Interrupted, Some(TurnFailureReason::ServiceDraining))
        );
        let asked = cancel_timed_out(None).turn_end();
        assert_eq!(
            (asked.state, asked.failure),
            (TurnState::Interrupted, Some(TurnFailureReason::CancelTimeout))
        );
        assert_eq!(cancel_timed_out(None).execution_end().reason, "cancel_timeout");
    }

    #[test]
    fn a_prompts_answer_ends_its_turn_by_the_table() {
        use TurnFailureReason::*;
        let draining = Some(ServiceDraining);
        let refused = |auth_required| PromptOutcome::Refused {
            auth_required,
            message: "nope".into(),
        };
        type Row<'a> = (
            PromptOutcome<'a>,
            Option<TurnFailureReason>,
            TurnState,
            Option<&'a str>,
            Option<TurnFailureReason>,
        );
        let table: [Row; 7] = [
            (
                PromptOutcome::Stopped(Some("end_turn")),
                None,
                TurnState::Completed,
                Some("end_turn"),
                None,
            ),
            (
                PromptOutcome::Stopped(Some("max_tokens")),
                draining,
                TurnState::Completed,
                Some("max_tokens"),
                None,
            ),
            (
                PromptOutcome::Stopped(Some("cancelled")),
                None,
                TurnState::Cancelled,
                Some("cancelled"),
                None,
            ),
            (
                PromptOutcome::Stopped(Some("cancelled")),
                draining,
                TurnState::Interrupted,
                Some("cancelled"),
                draining,
            ),
            (
                PromptOutcome::Stopped(None),
                None,
                TurnState::Failed,
                None,
                Some(ProtocolError),
            ),
            (refused(true), None, TurnState::Failed, None, Some(AuthRequired)),
            (refused(false), draining, TurnState::Failed, None, Some(ProtocolError)),
        ];
        for (outcome, interrupted_by, state, stop_reason, failure) in table {
            let described = format!("{outcome:?} with {interrupted_by:?}");
            let end = prompt_end(outcome, interrupted_by);
            assert_eq!(
                (end.state, end.stop_reason.as_deref(), end.failure),
                (state, stop_reason, failure),
                "{described}"
            );
            assert!(TurnState::Running.can_become(end.state), "{described}");
            assert_eq!(
                end.message.is_some(),
                end.failure.is_some(),
                "a failure says why: {described}"
            );
        }
    }

    #[test]
    fn a_turn_the_service_interrupted_says_why_in_words() {
        let end = prompt_end(
            PromptOutcome::Stopped(Some("cancelled")),
            Some(TurnFailureReason::DeadlineExceeded),
        );
        assert_eq!(end.message.as_deref(), Some("cancelled at the turn's deadline"));
    }
}
