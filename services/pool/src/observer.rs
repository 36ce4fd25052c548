//! What the pool reports as it works, for whoever counts it (the engine's Prometheus
//! metrics): the pool names what happened, the observer decides the series.

use cursor_runner_domain::error::Reason;
use cursor_runner_domain::state::{ProfileOrigin, SlotState};

use crate::slot::StartTimings;

/// Told of every slot move, lease, process start, counted failure and quarantine.
pub trait PoolObserver: Send + Sync {
    /// A slot of a profile of `origin` moved from `from` (`None`: new) to `to` (`None`: gone).
    fn slot_moved(&self, origin: ProfileOrigin, from: Option<SlotState>, to: Option<SlotState>);
    /// A process was leased to an execution: an idle one (`warm`) or a new one.
    fn leased(&self, warm: bool);
    /// The pool started a process: how long it took when it became ready, `None` when it failed.
    fn process_started(&self, ready: Option<StartTimings>);
    /// An agent failure that counts against its profile's restart intensity.
    fn failed(&self, reason: Reason);
    /// A profile was quarantined.
    fn quarantined(&self);
}
