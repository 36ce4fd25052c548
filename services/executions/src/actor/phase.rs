//! Where a running turn is: serving its prompt, or cancelled and waiting for the agent to
//! settle it. One enum instead of a deadline, a bound and a cause kept side by side, so a
//! turn cannot be both, and what the service cancelled it for travels with the cancel.

use cursor_runner_activity::TurnFailureReason;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TurnPhase {
    /// Serving the prompt; its bound before spend (deadline, budget), until it fires.
    Running {
        bound: Option<(Instant, TurnFailureReason)>,
    },
    /// `session/cancel` sent: the agent has until `grace_ends` to settle the turn. When
    /// the service, not the caller, cancelled it, a `cancelled` stop settles it
    /// `interrupted` with `interrupted_by`.
    Cancelling {
        grace_ends: Instant,
        interrupted_by: Option<TurnFailureReason>,
    },
}

impl TurnPhase {
    pub(super) fn is_running(&self) -> bool {
        matches!(self, Self::Running { .. })
    }

    /// When the cancel grace ends, while cancelling.
    pub(super) fn grace_ends(&self) -> Option<Instant> {
        match self {
            Self::Cancelling { grace_ends, .. } => Some(*grace_ends),
            Self::Running { .. } => None,
        }
    }

    /// The bound before spend, while running.
    pub(super) fn bound(&self) -> Option<(Instant, TurnFailureReason)> {
        match self {
            Self::Running { bound } => *bound,
            Self::Cancelling { .. } => None,
        }
    }

    pub(super) fn interrupted_by(&self) -> Option<TurnFailureReason> {
        match self {
            Self::Cancelling { interrupted_by, .. } => *interrupted_by,
            Self::Running { .. } => None,
        }
    }

    /// Cancels the turn: a running one starts cancelling (`true`: send `session/cancel`
    /// now); one already cancelling keeps its grace, and takes the service's cause if one
    /// is given (a replacement of a turn the caller had cancelled is an interruption).
    pub(super) fn cancel(&mut self, grace_ends: Instant, cause: Option<TurnFailureReason>) -> bool {
        match self {
            Self::Running { .. } => {
                *self = Self::Cancelling {
                    grace_ends,
                    interrupted_by: cause,
                };
                true
            }
            Self::Cancelling { interrupted_by, .. } => {
                if cause.is_some() {
                    *interrupted_by = cause;
                }
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn cancelling_a_running_turn_starts_its_grace_and_drops_its_bound() {
        let now = Instant::now();
        let mut phase = TurnPhase::Running {
            bound: Some((now, TurnFailureReason::DeadlineExceeded)),
        };
        assert!(phase.cancel(now + Duration::from_secs(15), None));
        assert_eq!(phase.grace_ends(), Some(now + Duration::from_secs(15)));
        assert_eq!(phase.bound(), None);
        assert_eq!(phase.interrupted_by(), None);
        assert!(!phase.is_running());
    }

    #[test]
    fn a_second_cancel_keeps_the_grace_and_takes_the_service_s_cause_only() {
        let now = Instant::now();
        let mut phase = TurnPhase::Running { bound: None };
        phase.cancel(now, None);
        assert!(!phase.cancel(
            now + Duration::from_secs(60),
            Some(TurnFailureReason::ReplacedByNewTurn)
        ));
        assert_eq!(phase.grace_ends(), Some(now));
        assert_eq!(phase.interrupted_by(), Some(TurnFailureReason::ReplacedByNewTurn));
        assert!(!phase.cancel(now, None));
        assert_eq!(phase.interrupted_by(), Some(TurnFailureReason::ReplacedByNewTurn));
    }

    #[test]
    fn a_running_turn_has_its_bound_and_no_grace_or_cause() {
        let now = Instant::now();
        let phase = TurnPhase::Running {
            bound: Some((now, TurnFailureReason::BudgetExhausted)),
        };
        assert!(phase.is_running());
        assert_eq!(phase.bound(), Some((now, TurnFailureReason::BudgetExhausted)));
        assert_eq!((phase.grace_ends(), phase.interrupted_by()), (None, None));
    }
}
