//! What `GetPoolStatus` reports: each profile, its slots, the pool's limits.

use crate::intensity::RestartIntensity;
use std::time::Duration;

use cursor_runner_domain::error::Reason;
use cursor_runner_domain::state::{ProfileHealth, SlotState};

/// One profile in `GetPoolStatus`.
#[derive(Debug, Clone)]
pub struct ProfileStatus {
    pub profile_id: String,
    pub tenant_id: String,
    pub distribution: String,
    pub credential_name: Option<String>,
    /// The operator's agent profile its processes run under.
    pub agent_profile: Option<String>,
    pub credential_fingerprint: Option<String>,
    /// Kept warm by the operator's configuration (else learned from a `CreateExecution`).
    pub configured: bool,
    pub min_idle: usize,
    pub health: ProfileHealth,
    pub quarantine_reason: Option<Reason>,
    pub quarantine_message: Option<String>,
    /// How much longer the quarantine lasts.
    pub quarantine_remaining: Option<Duration>,
    pub failures_in_window: usize,
    pub oldest_idle_age: Option<Duration>,
    pub slots: Vec<SlotStatus>,
}

impl ProfileStatus {
    pub fn count(&self, state: SlotState) -> usize {
        self.slots.iter().filter(|s| s.state == state).count()
    }
}

#[derive(Debug, Clone)]
pub struct SlotStatus {
    pub slot_id: String,
    pub state: SlotState,
    pub pid: Option<u32>,
    /// Time in the current state.
    pub age: Duration,
    pub sessions_served: u32,
}

#[derive(Debug, Clone)]
pub struct PoolStatus {
    pub draining: bool,
    pub max_processes: usize,
    pub max_per_profile: usize,
    pub intensity: RestartIntensity,
    pub profiles: Vec<ProfileStatus>,
}
