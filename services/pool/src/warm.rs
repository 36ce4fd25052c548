//! A warm process: leased to an execution ([`WarmProcess`]), or parked idle with what
//! travels with it ([`WarmParts`]).

use cursor_runner_acp::{AcpConnection, InboundStream};
use cursor_runner_supervisor::AgentProcess;

use crate::slot::*;
use crate::ticket::*;

/// A process leased to an execution (or on its way to one).
pub struct WarmProcess {
    pub process: AgentProcess,
    pub connection: AcpConnection,
    pub inbound: InboundStream,
    pub timings: StartTimings,
    /// What `initialize` answered (the agent's capabilities).
    pub initialized: serde_json::Value,
    /// Sessions this process served before this one.
    pub sessions_served: u32,
    /// Dropped last: the slot's bookkeeping ends when the process does.
    pub ticket: SlotTicket,
}

/// What travels with an idle process: its slot and its history.
pub(crate) struct WarmParts {
    pub(crate) ticket: SlotTicket,
    pub(crate) timings: StartTimings,
    pub(crate) initialized: serde_json::Value,
    pub(crate) sessions_served: u32,
}
