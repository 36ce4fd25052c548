//! The pool's reports as Prometheus series (`cursor_runner_pool_*`, and the agent start
//! times of the processes it starts).

use cursor_runner_domain::error::Reason;
use cursor_runner_domain::state::{ProfileOrigin, SlotState};
use cursor_runner_pool::{PoolObserver, StartTimings};

use super::{LeaseKindLabel, Metrics, OutcomeLabel, ReasonLabel, SlotLabels};

impl PoolObserver for Metrics {
    fn slot_moved(&self, origin: ProfileOrigin, from: Option<SlotState>, to: Option<SlotState>) {
        let profile = origin.as_str();
        if let Some(state) = from {
            let state = state.as_str();
            self.pool_slots.get_or_create(&SlotLabels { state, profile }).dec();
        }
        if let Some(state) = to {
            let state = state.as_str();
            self.pool_slots.get_or_create(&SlotLabels { state, profile }).inc();
        }
    }

    fn leased(&self, warm: bool) {
        let kind = if warm { "warm" } else { "cold" };
        self.pool_leases.get_or_create(&LeaseKindLabel { kind }).inc();
    }

    fn process_started(&self, ready: Option<StartTimings>) {
        let outcome = if ready.is_some() { "ready" } else { "failed" };
        self.pool_process_starts.get_or_create(&OutcomeLabel { outcome }).inc();
        if let Some(timings) = ready {
            self.agent_started(timings.spawn, timings.initialize);
        }
    }

    fn failed(&self, reason: Reason) {
        self.pool_failures
            .get_or_create(&ReasonLabel {
                reason: reason.as_str(),
            })
            .inc();
    }

    fn quarantined(&self) {
        self.pool_quarantines.inc();
    }
}
