//! What replicas of one fleet do for each other: takeovers, forwarded calls, and the
//! session checkpoints that let a session move between them.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::labels::OutcomeLabel;

/// `cursor_runner_forwarded_calls_total`'s outcomes: the owner answered, or did not.
const FORWARD_OUTCOMES: [&str; 2] = ["answered", "unreachable"];
/// `cursor_runner_session_checkpoints_total`'s outcomes.
const CHECKPOINT_OUTCOMES: [&str; 4] = ["stored", "superseded", "refused", "failed"];

/// The fleet's families; [`super::Metrics`] holds one.
pub(super) struct FleetMetrics {
    takeovers: Counter,
    forwarded_calls: Family<OutcomeLabel, Counter>,
    session_checkpoints: Family<OutcomeLabel, Counter>,
}

impl FleetMetrics {
    pub(super) fn registered(registry: &mut Registry) -> Self {
        let takeovers = Counter::default();
        registry.register(
            "takeovers",
            "Executions this replica took over from a replica whose ownership lease ended (each settled lost, OWNER_LOST)",
            takeovers.clone(),
        );
        let forwarded_calls = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "forwarded_calls",
            "Calls for executions another replica owns that this one forwarded to the owner, by outcome: answered (the owner's answer, refusals included) or unreachable (OWNER_UNREACHABLE)",
            forwarded_calls.clone(),
        );
        let session_checkpoints = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "session_checkpoints",
            "Checkpoints of a session's home taken between turns and at close, by outcome: stored, superseded (fenced, or older than the stored one), refused (over a bound: the previous one stays) or failed (the store did not take it)",
            session_checkpoints.clone(),
        );
        for outcome in FORWARD_OUTCOMES {
            forwarded_calls.get_or_create(&OutcomeLabel { outcome }).inc_by(0);
        }
        for outcome in CHECKPOINT_OUTCOMES {
            session_checkpoints.get_or_create(&OutcomeLabel { outcome }).inc_by(0);
        }
        Self {
            takeovers,
            forwarded_calls,
            session_checkpoints,
        }
    }
}

impl FleetMetrics {
    pub(super) fn taken_over(&self) {
        self.takeovers.inc();
    }

    pub(super) fn call_forwarded(&self, answered: bool) {
        let [answered_outcome, unreachable] = FORWARD_OUTCOMES;
        let outcome = if answered { answered_outcome } else { unreachable };
        self.forwarded_calls.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    pub(super) fn session_checkpoint(&self, outcome: &'static str) {
        debug_assert!(CHECKPOINT_OUTCOMES.contains(&outcome), "{outcome}");
        self.session_checkpoints.get_or_create(&OutcomeLabel { outcome }).inc();
    }
}
