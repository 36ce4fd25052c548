//! The execution's decisions, sans I/O. A machine takes an input — with the time as a value
//! — and returns the effects to run, strictly in order; the actor runs them and feeds back
//! what an effect that can fail reported. Nothing here touches the store, the pipe, a task
//! or the clock (`tests/workspace/machine.rs` keeps it so), which is what lets every
//! state × input be a table test and a crash window be "drop the effects after index k".

#[cfg(test)]
mod admission_tests;
pub(crate) mod drain;
#[cfg(test)]
mod drain_tests;
pub(crate) mod interaction;
#[cfg(test)]
mod interaction_tests;
pub(crate) mod session;
#[cfg(test)]
mod session_tests;
pub(crate) mod turn;
#[cfg(test)]
mod turn_tests;

use tokio::time::Instant;

/// The time an input arrived at, read once by the runtime: the monotonic instant for
/// deadlines and durations, the wall clock in milliseconds for rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Now {
    pub(crate) instant: Instant,
    pub(crate) ms: i64,
}
