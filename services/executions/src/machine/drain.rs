//! One execution's part in a drain of its replica (`docs/scale-out.md` D11): the running turn
//! may settle until the deadline, is cancelled at it, and once no turn runs or waits to the
//! agent is stopped and the execution ends `lost` / `DRAINING`, which `RecoverExecution`
//! continues on any replica. A second drain only brings the deadline forward; a forced one
//! (the service is shutting down) ends the execution at once. The callers' replies stay with
//! the runtime: this decides only when.

use tokio::time::Instant;

/// What the drain hears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DrainInput {
    /// The service asks to drain by `deadline`; `force`: now.
    Asked { deadline: Instant, force: bool },
    /// The armed deadline passed; `turn_running`: a turn runs and is not being cancelled.
    DeadlinePassed { turn_running: bool },
    /// A step of the execution ended: whether a turn is live (running or cancelling) and
    /// whether a replacement waits to start.
    Stepped { turn_live: bool, start_queued: bool },
}

/// What the drain decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DrainEffect {
    /// Cancel the running turn, as interrupted by the drain (`service_draining`).
    CancelTurn,
    /// Stop the agent and end the execution `lost` / `DRAINING`, whatever is live.
    End,
}

/// Whether, and until when, the execution drains.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Drain {
    draining: Option<Draining>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Draining {
    deadline: Instant,
    /// The deadline passed: the running turn was cancelled, and nothing more is armed.
    cancelled: bool,
}

impl Drain {
    /// New turns are refused from the first drain on.
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.is_some()
    }

    /// The deadline to arm: until it has passed once.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.draining.filter(|d| !d.cancelled).map(|d| d.deadline)
    }

    pub(crate) fn handle(&mut self, input: DrainInput) -> Option<DrainEffect> {
        match (&mut self.draining, input) {
            (_, DrainInput::Asked { force: true, deadline }) => {
                self.ask(deadline);
                Some(DrainEffect::End)
            }
            (_, DrainInput::Asked { deadline, .. }) => {
                self.ask(deadline);
                None
            }
            (None, _) => None,
            (Some(draining), DrainInput::DeadlinePassed { turn_running }) if !draining.cancelled => {
                draining.cancelled = true;
                turn_running.then_some(DrainEffect::CancelTurn)
            }
            (Some(_), DrainInput::DeadlinePassed { .. }) => None,
            (
                Some(_),
                DrainInput::Stepped {
                    turn_live,
                    start_queued,
                },
            ) => (!turn_live && !start_queued).then_some(DrainEffect::End),
        }
    }

    /// A drain begins, or one under way is asked again: the earlier deadline holds.
    fn ask(&mut self, deadline: Instant) {
        match &mut self.draining {
            Some(draining) => draining.deadline = draining.deadline.min(deadline),
            None => {
                self.draining = Some(Draining {
                    deadline,
                    cancelled: false,
                })
            }
        }
    }
}
