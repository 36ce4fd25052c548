//! An execution's bounds before spend: a per-turn wall-clock deadline and limits on its
//! turns and total active time, each `None` when unbounded. The caller sets them at
//! `CreateExecution`, the tenant's policy caps them, and the next turn's bound (and the
//! reason a bound that is hit gives) is decided here.

use std::time::Duration;

use cursor_runner_activity::TurnFailureReason;

use crate::error::{EngineError, ErrorKind, Reason};

/// The shortest deadline or active-time budget accepted: limits are kept in whole
/// milliseconds, and a shorter one would be kept as zero, refusing every turn.
pub const MIN_LIMIT_DURATION: Duration = Duration::from_millis(1);
/// The longest deadline or active-time budget accepted (30 days).
pub const MAX_LIMIT_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);
/// The most turns an execution may be limited to.
pub const MAX_TURNS_LIMIT: u32 = 1_000_000;
/// An execution's limits; `None` is unbounded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExecutionLimits {
    pub turn_deadline: Option<Duration>,
    pub max_turns: Option<u32>,
    pub max_active: Option<Duration>,
}

impl ExecutionLimits {
    /// Refuses zero, sub-millisecond and out-of-range values: a limit of zero would refuse
    /// every turn.
    pub fn validate(&self) -> Result<(), EngineError> {
        let invalid = |m: String| EngineError::invalid(Reason::InvalidArgument, m);
        for (name, value) in [
            ("turn_deadline", self.turn_deadline),
            ("max_active_time", self.max_active),
        ] {
            if let Some(d) = value
                && !(MIN_LIMIT_DURATION..=MAX_LIMIT_DURATION).contains(&d)
            {
                return Err(invalid(format!(
                    "{name} must be at least {MIN_LIMIT_DURATION:?} and at most {MAX_LIMIT_DURATION:?}"
                )));
            }
        }
        if let Some(n) = self.max_turns
            && (n == 0 || n > MAX_TURNS_LIMIT)
        {
            return Err(invalid(format!("max_turns must be 1..={MAX_TURNS_LIMIT}")));
        }
        Ok(())
    }

    /// Each limit the tighter of the request's and the policy's: a tenant's policy is a
    /// ceiling the caller can lower, never raise.
    pub fn capped_by(self, policy: ExecutionLimits) -> Self {
        fn tighter<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        Self {
            turn_deadline: tighter(self.turn_deadline, policy.turn_deadline),
            max_turns: tighter(self.max_turns, policy.max_turns),
            max_active: tighter(self.max_active, policy.max_active),
        }
    }

    /// Whether an execution that has run `turns_used` turns for `active_used` in all may
    /// start another, and if so how long it may run before a bound cancels it (with the
    /// reason that bound gives).
    pub fn next_turn(
        &self,
        turns_used: i64,
        active_used: Duration,
    ) -> Result<Option<(Duration, TurnFailureReason)>, EngineError> {
        let exhausted = |m: String| EngineError::new(ErrorKind::ResourceExhausted, Reason::BudgetExhausted, m);
        if let Some(max) = self.max_turns
            && turns_used >= i64::from(max)
        {
            return Err(exhausted(format!("the execution's {max} turns are used up")));
        }
        let remaining = match self.max_active {
            None => None,
            Some(max) => match max.checked_sub(active_used).filter(|left| !left.is_zero()) {
                Some(left) => Some(left),
                None => return Err(exhausted(format!("the execution's {max:?} of active time are used up"))),
            },
        };
        Ok(match (self.turn_deadline, remaining) {
            (Some(deadline), Some(left)) if left < deadline => Some((left, TurnFailureReason::BudgetExhausted)),
            (Some(deadline), _) => Some((deadline, TurnFailureReason::DeadlineExceeded)),
            (None, Some(left)) => Some((left, TurnFailureReason::BudgetExhausted)),
            (None, None) => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    /// The bound the next turn gets, or `Err(())`: refused as exhausted.
    type Expected = Result<Option<(Duration, TurnFailureReason)>, ()>;

    #[test]
    fn the_next_turn_gets_the_tighter_bound_with_its_reason() {
        use TurnFailureReason::{BudgetExhausted, DeadlineExceeded};
        let limits = |deadline, turns, active| ExecutionLimits {
            turn_deadline: deadline,
            max_turns: turns,
            max_active: active,
        };
        let cases: &[(ExecutionLimits, i64, u64, Expected)] = &[
            (limits(None, None, None), 5, 10_000, Ok(None)),
            (
                limits(Some(S(60)), None, None),
                0,
                0,
                Ok(Some((S(60), DeadlineExceeded))),
            ),
            (
                limits(None, None, Some(S(100))),
                0,
                40_000,
                Ok(Some((S(60), BudgetExhausted))),
            ),
            (
                limits(Some(S(30)), None, Some(S(100))),
                0,
                40_000,
                Ok(Some((S(30), DeadlineExceeded))),
            ),
            (
                limits(Some(S(90)), None, Some(S(100))),
                0,
                40_000,
                Ok(Some((S(60), BudgetExhausted))),
            ),
            (limits(None, Some(3), None), 2, 0, Ok(None)),
            (limits(None, Some(3), None), 3, 0, Err(())),
            (limits(None, None, Some(S(100))), 0, 100_000, Err(())),
            (limits(None, None, Some(S(100))), 0, 250_000, Err(())),
        ];
        for (limits, turns, active, expected) in cases {
            let got = limits.next_turn(*turns, Duration::from_millis(*active));
            match (got, expected) {
                (Ok(got), Ok(expected)) => assert_eq!(&got, expected, "{limits:?} {turns} {active}"),
                (Err(e), Err(())) => assert_eq!(e.reason, Reason::BudgetExhausted),
                (got, expected) => panic!("{limits:?}: got {got:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn a_policy_is_a_ceiling_the_caller_can_lower_but_not_raise() {
        let policy = ExecutionLimits {
            turn_deadline: Some(S(600)),
            max_turns: None,
            max_active: Some(S(3600)),
        };
        let asked = ExecutionLimits {
            turn_deadline: Some(S(6000)),
            max_turns: Some(5),
            max_active: Some(S(60)),
        };
        assert_eq!(
            asked.capped_by(policy),
            ExecutionLimits {
                turn_deadline: Some(S(600)),
                max_turns: Some(5),
                max_active: Some(S(60)),
            }
        );
        assert_eq!(ExecutionLimits::default().capped_by(policy), policy);
    }

    #[test]
    fn limits_at_their_bounds_pass_and_beyond_them_are_refused() {
        let ok = ExecutionLimits {
            turn_deadline: Some(MAX_LIMIT_DURATION),
            max_turns: Some(MAX_TURNS_LIMIT),
            max_active: Some(Duration::from_millis(1)),
        };
        assert!(ok.validate().is_ok());
        for bad in [
            ExecutionLimits {
                turn_deadline: Some(MAX_LIMIT_DURATION + Duration::from_millis(1)),
                ..ok
            },
            ExecutionLimits {
                turn_deadline: Some(Duration::ZERO),
                ..ok
            },
            ExecutionLimits {
                max_turns: Some(0),
                ..ok
            },
            ExecutionLimits {
                max_turns: Some(MAX_TURNS_LIMIT + 1),
                ..ok
            },
            ExecutionLimits {
                max_active: Some(Duration::ZERO),
                ..ok
            },
            ExecutionLimits {
                max_active: Some(MIN_LIMIT_DURATION - Duration::from_nanos(1)),
                ..ok
            },
            ExecutionLimits {
                turn_deadline: Some(Duration::from_micros(500)),
                ..ok
            },
        ] {
            assert_eq!(bad.validate().unwrap_err().reason, Reason::InvalidArgument, "{bad:?}");
        }
    }
}
