//! Bounds before spend: a per-turn wall-clock deadline and per-execution limits on turns
//! and total active time, set at `CreateExecution` and capped by the tenant's policy.
//! A bound that is hit cancels the turn through the normal cancellation path with a
//! typed reason; a prompt is never retried automatically.

use std::collections::HashMap;
use std::time::Duration;

use cursor_runner_activity::TurnFailureReason;
use cursor_runner_store::ExecutionRecord;
use serde::Deserialize;

use cursor_runner_domain::error::{EngineError, ErrorKind, Reason};

/// The longest deadline or active-time budget accepted (30 days).
pub const MAX_LIMIT_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);
/// The most turns an execution may be limited to.
pub const MAX_TURNS_LIMIT: u32 = 1_000_000;
/// The turn deadline of an execution that names none (and whose tenant sets none): a hung
/// agent cannot hold a turn `running` for ever.
pub const DEFAULT_TURN_DEADLINE: Duration = Duration::from_secs(2 * 3600);
/// How long a turn may go without a single message from the agent, while nothing waits
/// on a human, before it is cancelled (`agent_idle`): long enough for a silent build or
/// test run, short enough that a hung agent is noticed well before the deadline.
pub const DEFAULT_TURN_IDLE_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How long the agent may take to answer a request the actor sends outside the handshake
/// (a configuration change, the model catalog) before the call is refused
/// `AGENT_UNRESPONSIVE`: Cursor answers them from its own state or one catalog fetch, well
/// within this; the handshake's longer bound covers a cold start these never pay.
pub const AGENT_CALL_LIMIT: Duration = Duration::from_secs(15);
/// How long an execution rides out a store that does not answer before it fails: a
/// database restart or fail-over takes seconds; an agent blocked on its output pipe for
/// this long is still cheaper than a lost execution.
pub const DEFAULT_STORE_OUTAGE_LIMIT: Duration = Duration::from_secs(30);

/// An execution's limits; `None` is unbounded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExecutionLimits {
    pub turn_deadline: Option<Duration>,
    pub max_turns: Option<u32>,
    pub max_active: Option<Duration>,
}

impl ExecutionLimits {
    /// Refuses zero and out-of-range values: a limit of zero would refuse every turn.
    pub fn validate(&self) -> Result<(), EngineError> {
        let invalid = |m: String| EngineError::invalid(Reason::InvalidArgument, m);
        for (name, value) in [
            ("turn_deadline", self.turn_deadline),
            ("max_active_time", self.max_active),
        ] {
            if let Some(d) = value
                && (d.is_zero() || d > MAX_LIMIT_DURATION)
            {
                return Err(invalid(format!(
                    "{name} must be above zero and at most {MAX_LIMIT_DURATION:?}"
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

    pub fn of(record: &ExecutionRecord) -> Self {
        let duration = |ms: Option<i64>| ms.map(|ms| Duration::from_millis(ms.max(0) as u64));
        Self {
            turn_deadline: duration(record.turn_deadline_ms),
            max_turns: record.max_turns.map(|n| n.clamp(0, i64::from(u32::MAX)) as u32),
            max_active: duration(record.max_active_ms),
        }
    }

    pub fn store_in(&self, record: &mut ExecutionRecord) {
        let ms = |d: Option<Duration>| d.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        record.turn_deadline_ms = ms(self.turn_deadline);
        record.max_turns = self.max_turns.map(i64::from);
        record.max_active_ms = ms(self.max_active);
    }

    /// Whether the execution may start another turn, and if so how long it may run
    /// before a bound cancels it (with the reason that bound gives).
    pub fn next_turn(&self, record: &ExecutionRecord) -> Result<Option<(Duration, TurnFailureReason)>, EngineError> {
        let exhausted = |m: String| EngineError::new(ErrorKind::ResourceExhausted, Reason::BudgetExhausted, m);
        if let Some(max) = self.max_turns
            && record.turn_count >= i64::from(max)
        {
            return Err(exhausted(format!("the execution's {max} turns are used up")));
        }
        let remaining = match self.max_active {
            None => None,
            Some(max) => {
                let used = Duration::from_millis(record.active_ms.max(0) as u64);
                match max.checked_sub(used).filter(|left| !left.is_zero()) {
                    Some(left) => Some(left),
                    None => return Err(exhausted(format!("the execution's {max:?} of active time are used up"))),
                }
            }
        };
        Ok(match (self.turn_deadline, remaining) {
            (Some(deadline), Some(left)) if left < deadline => Some((left, TurnFailureReason::BudgetExhausted)),
            (Some(deadline), _) => Some((deadline, TurnFailureReason::DeadlineExceeded)),
            (None, Some(left)) => Some((left, TurnFailureReason::BudgetExhausted)),
            (None, None) => None,
        })
    }
}

/// A tenant's limits as an operator writes them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsSpec {
    turn_deadline_secs: Option<u64>,
    max_turns: Option<u32>,
    max_active_secs: Option<u64>,
}

impl From<LimitsSpec> for ExecutionLimits {
    fn from(spec: LimitsSpec) -> Self {
        Self {
            turn_deadline: spec.turn_deadline_secs.map(Duration::from_secs),
            max_turns: spec.max_turns,
            max_active: spec.max_active_secs.map(Duration::from_secs),
        }
    }
}

/// Per-tenant ceilings (`serve --tenant-limits FILE`):
/// `{"default": {"turn_deadline_secs": 3600}, "tenants": {"acme": {"max_turns": 50}}}`.
/// A tenant's entry replaces the default for that tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantLimits {
    default: ExecutionLimits,
    tenants: HashMap<String, ExecutionLimits>,
}

#[derive(Debug, thiserror::Error)]
#[error("the tenant limits are unusable: {0}")]
pub struct TenantLimitsError(String);

impl TenantLimits {
    pub fn parse(text: &str) -> Result<Self, TenantLimitsError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            #[serde(default)]
            default: LimitsSpec,
            #[serde(default)]
            tenants: HashMap<String, LimitsSpec>,
        }
        let file: File = serde_json::from_str(text).map_err(|e| TenantLimitsError(e.to_string()))?;
        let check = |who: &str, limits: ExecutionLimits| {
            limits
                .validate()
                .map(|()| limits)
                .map_err(|e| TenantLimitsError(format!("{who}: {}", e.message)))
        };
        Ok(Self {
            default: check("default", file.default.into())?,
            tenants: file
                .tenants
                .into_iter()
                .map(|(tenant, spec)| check(&tenant, spec.into()).map(|limits| (tenant, limits)))
                .collect::<Result<_, _>>()?,
        })
    }

    pub fn for_tenant(&self, tenant_id: &str) -> ExecutionLimits {
        self.tenants.get(tenant_id).copied().unwrap_or(self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cursor_runner_domain::state::ExecutionState;

    fn record(turn_count: i64, active_ms: i64) -> ExecutionRecord {
        ExecutionRecord {
            id: "e".into(),
            tenant_id: "t".into(),
            state: ExecutionState::Ready,
            generation: cursor_runner_store::Generation::FIRST,
            workspace: "/w".into(),
            session_id: None,
            active_turn_id: None,
            turn_count,
            pid: None,
            exit_code: None,
            exit_signal: None,
            failure_reason: None,
            failure_message: None,
            acked_sequence: 0,
            created_at_ms: 0,
            updated_at_ms: 0,
            approval_policy: Default::default(),
            interaction_wait_limit_ms: 0,
            lease: None,
            session_config: None,
            credential_name: None,
            turn_deadline_ms: None,
            max_turns: None,
            max_active_ms: None,
            active_ms,
        }
    }

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
        let cases: &[(ExecutionLimits, i64, i64, Expected)] = &[
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
            let got = limits.next_turn(&record(*turns, *active));
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
        ] {
            assert_eq!(bad.validate().unwrap_err().reason, Reason::InvalidArgument, "{bad:?}");
        }
    }

    #[test]
    fn tenant_limits_fall_back_to_the_default_and_refuse_nonsense() {
        let limits =
            TenantLimits::parse(r#"{"default": {"turn_deadline_secs": 3600}, "tenants": {"acme": {"max_turns": 50}}}"#)
                .unwrap();
        assert_eq!(limits.for_tenant("globex").turn_deadline, Some(S(3600)));
        assert_eq!(limits.for_tenant("acme").max_turns, Some(50));
        assert_eq!(
            limits.for_tenant("acme").turn_deadline,
            None,
            "an entry replaces the default"
        );
        for bad in [
            r#"{"default": {"max_turns": 0}}"#,
            r#"{"tenants": {"x": {"turn_deadline_secs": 0}}}"#,
            r#"{"defaults": {}}"#,
            r#"{"default": {"deadline": 5}}"#,
        ] {
            assert!(TenantLimits::parse(bad).is_err(), "{bad}");
        }
    }
}
