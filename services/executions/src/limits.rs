//! Bounds before spend: a per-turn wall-clock deadline and per-execution limits on turns
//! and total active time, set at `CreateExecution` and capped by the tenant's policy.
//! A bound that is hit cancels the turn through the normal cancellation path with a
//! typed reason; a prompt is never retried automatically.

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;

pub use cursor_runner_domain::limits::{ExecutionLimits, MAX_LIMIT_DURATION, MAX_TURNS_LIMIT};

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

/// Most `session/update`s normalized into one outbox append: as many as the connection's
/// inbound queue holds, so one append can take all that waited while the one before it
/// committed (a commit, not the normalizer, paces a chatty agent otherwise). At 1024 an
/// agent flooding text filled its run before the append ahead of it committed and waited
/// on it: P1 ran at ~345k updates/s with a seventh of the machine idle; at 4096, ~440k/s.
pub const MAX_UPDATES_PER_APPEND: usize = 4096;

const _: () = assert!(MAX_UPDATES_PER_APPEND == cursor_runner_acp::INBOUND_QUEUE);

/// Most bytes of the agent's stdout whose updates are normalized into one outbox append
/// (the first update of a run is taken whatever its size): with the inbound queue's own
/// byte bound (`acp::MAX_INBOUND_QUEUE_BYTES`), what long lines can hold in memory while
/// an append waits on the store. Each text delta is cut to 64 Ki characters, so by count
/// alone a run could have held a thousand of them.
pub const MAX_LINE_BYTES_PER_APPEND: usize = 4 * 1024 * 1024;

/// Whether a run of `updates` updates, behind which `line_bytes` bytes of the agent's stdout
/// were taken (the first update's own are not counted), takes one more message: below both
/// [`MAX_UPDATES_PER_APPEND`] and [`MAX_LINE_BYTES_PER_APPEND`].
pub(crate) fn run_takes_more(updates: usize, line_bytes: usize) -> bool {
    updates < MAX_UPDATES_PER_APPEND && line_bytes < MAX_LINE_BYTES_PER_APPEND
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

    const S: fn(u64) -> Duration = Duration::from_secs;

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

    #[test]
    fn a_run_takes_messages_until_it_holds_the_most_updates_and_not_one_more() {
        assert!(run_takes_more(1, 0));
        assert!(run_takes_more(MAX_UPDATES_PER_APPEND - 1, 0));
        assert!(!run_takes_more(MAX_UPDATES_PER_APPEND, 0));
    }

    #[test]
    fn a_run_takes_messages_until_the_bytes_behind_its_first_reach_the_bound() {
        assert!(run_takes_more(2, MAX_LINE_BYTES_PER_APPEND - 1));
        assert!(!run_takes_more(2, MAX_LINE_BYTES_PER_APPEND));
        assert!(!run_takes_more(2, MAX_LINE_BYTES_PER_APPEND + 1));
    }
}
